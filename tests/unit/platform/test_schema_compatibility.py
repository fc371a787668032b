"""The compatibility checker: every mode with an accepted and a refused change, for pydantic
models (open and closed) and plain JSON Schema dicts."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field

from ripple.platform.events.contracts.compatibility import judge, reader_accepts
from ripple.platform.events.contracts.paths import undeclared_paths
from ripple.platform.events.contracts.records import Compatibility


def schema(model: type[BaseModel]) -> dict[str, Any]:
    return model.model_json_schema()


# -- closed pydantic models (extra="forbid") ------------------------------------------------


class Closed(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SignupV1(Closed):
    userId: int
    email: str


class SignupAddOptional(Closed):
    userId: int
    email: str
    plan: str | None = None


class SignupAddRequired(Closed):
    userId: int
    email: str
    plan: str


class SignupRemoveEmail(Closed):
    userId: int


class SignupIdAsString(Closed):
    userId: str
    email: str


class SignupIdAsNumber(Closed):
    userId: float
    email: str


def verdict(mode: Compatibility, new: type[BaseModel], *old: type[BaseModel]) -> list[str]:
    found = judge(mode, schema(new), [(i + 1, schema(m)) for i, m in enumerate(old)])
    assert not found.unseen, "closed models leave nothing to look up"
    return found.problems


@pytest.mark.parametrize(
    ("mode", "base", "accepted", "refused", "path"),
    [
        ("backward", SignupV1, SignupAddOptional, SignupAddRequired, "/plan"),
        ("backward", SignupV1, SignupIdAsNumber, SignupIdAsString, "/userId"),
        ("forward", SignupAddOptional, SignupAddRequired, SignupIdAsNumber, "/userId"),
        ("forward", SignupAddOptional, SignupV1, SignupIdAsString, "/userId"),
        ("full", SignupV1, SignupV1, SignupAddOptional, "/plan"),
        ("full", SignupV1, SignupV1, SignupIdAsNumber, "/userId"),
    ],
)
def test_judge__closed_models_accept_and_refuse_by_mode(
    mode: Compatibility,
    base: type[BaseModel],
    accepted: type[BaseModel],
    refused: type[BaseModel],
    path: str,
) -> None:
    assert verdict(mode, accepted, base) == []
    problems = verdict(mode, refused, base)
    assert problems
    assert all(p.startswith(path + ":") for p in problems), problems


def test_judge__none_accepts_anything() -> None:
    assert verdict("none", SignupIdAsString, SignupV1) == []
    assert verdict("none", SignupAddRequired, SignupV1) == []


def test_judge__backward_removing_a_property_from_a_closed_model_is_refused() -> None:
    problems = verdict("backward", SignupRemoveEmail, SignupV1)
    assert problems == [
        "/email: the new schema is closed (additionalProperties: false) and lacks this "
        "property, which version 1 wrote"
    ]


class V2(Closed):
    userId: int
    email: str | None = None


class V3(Closed):
    userId: int


def test_judge__backward_transitive_checks_every_earlier_version() -> None:
    # v1 wrote userId as a string, v2 (registered under "none") as an integer.
    history = (SignupIdAsString, SignupV1)
    assert verdict("backward", SignupIdAsNumber, *history) == []
    assert verdict("backward_transitive", SignupIdAsNumber, *history) == [
        "/userId: the new schema reads number, but version 1 wrote string"
    ]


def test_judge__forward_transitive_checks_every_earlier_version() -> None:
    # v1 requires email, v2 makes it optional, the new one drops it (closed).
    assert verdict("forward", V3, SignupV1, V2) == []
    assert verdict("forward_transitive", V3, SignupV1, V2) == [
        "/email: version 1 requires this property; the new schema did not have it"
    ]


def test_judge__full_transitive_checks_both_directions_against_all() -> None:
    assert verdict("full_transitive", V2, SignupV1, V2) != []
    assert verdict("full_transitive", SignupV1, SignupV1) == []


# -- open pydantic models (the default) ------------------------------------------------------


class OpenV1(BaseModel):
    userId: int


class OpenV2(BaseModel):
    userId: int
    plan: str | None = None


def test_judge__open_backward_addition_is_pending_on_the_stored_events() -> None:
    found = judge("backward", schema(OpenV2), [(1, schema(OpenV1))])
    assert found.problems == []
    assert found.unseen == [("plan",)]


def test_judge__open_forward_removal_is_refused_with_advice() -> None:
    found = judge("forward", schema(OpenV1), [(1, schema(OpenV2))])
    assert len(found.problems) == 1
    assert found.problems[0].startswith("/plan: the new schema is an open model")
    assert "extra='forbid'" in found.problems[0]


def test_judge__open_backward_removal_is_accepted() -> None:
    assert judge("backward", schema(OpenV1), [(1, schema(OpenV2))]).problems == []


def test_judge__closing_an_open_model_is_refused_backward() -> None:
    class ClosedV1(Closed):
        userId: int

    problems = judge("backward", schema(ClosedV1), [(1, schema(OpenV1))]).problems
    assert problems == [
        "/: the new schema closed additionalProperties; version 1 allowed other properties"
    ]
    assert judge("forward", schema(ClosedV1), [(1, schema(OpenV1))]).problems == []


# -- JSON Schema dicts: the keywords judged ---------------------------------------------------


def obj(props: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": required or [],
        "additionalProperties": False,
        **extra,
    }


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # enum: adding a value is backward compatible, removing one is not
        ({"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}, []),
        ({"enum": ["a", "b"]}, {"enum": ["a"]}, ['/v: the new schema does not accept "b"']),
        ({"const": 1}, {"enum": [1, 2]}, []),
        # numeric and length bounds
        ({"type": "integer", "minimum": 0}, {"type": "integer", "minimum": -5}, []),
        ({"type": "integer", "minimum": 0}, {"type": "integer", "minimum": 1}, ["/v: lower"]),
        ({"type": "integer"}, {"type": "integer", "exclusiveMaximum": 10}, ["/v: upper"]),
        ({"type": "string", "maxLength": 5}, {"type": "string", "maxLength": 9}, []),
        ({"type": "string", "maxLength": 9}, {"type": "string", "maxLength": 5}, ["/v: maxLength"]),
        ({"type": "string"}, {"type": "string", "minLength": 1}, ["/v: minLength"]),
        # format
        ({"type": "string", "format": "email"}, {"type": "string"}, []),
        ({"type": "string"}, {"type": "string", "format": "uuid"}, ["/v: the new schema requires"]),
        # optional via anyOf: widening to nullable is fine, narrowing is not
        ({"type": "string"}, {"anyOf": [{"type": "string"}, {"type": "null"}]}, []),
        ({"anyOf": [{"type": "string"}, {"type": "null"}]}, {"type": "string"}, ["/v: the new"]),
        # items
        (
            {"type": "array", "items": {"type": "integer"}},
            {"type": "array", "items": {"type": "number"}},
            [],
        ),
        (
            {"type": "array", "items": {"type": "integer"}},
            {"type": "array", "items": {"type": "string"}},
            ["/v/*: the new schema reads string"],
        ),
        # a keyword Ripple does not judge: conservatively breaking when changed
        (
            {"type": "object"},
            {"type": "object", "propertyNames": {"maxLength": 3}},
            ["/v: keyword"],
        ),
    ],
)
def test_reader_accepts__judged_keywords(
    old: dict[str, Any], new: dict[str, Any], expected: list[str]
) -> None:
    found = judge("backward", obj({"v": new}, ["v"]), [(1, obj({"v": old}, ["v"]))]).problems
    assert len(found) == len(expected), found
    for problem, start in zip(found, expected, strict=True):
        assert problem.startswith(start), found


def test_reader_accepts__refs_and_defs_are_followed_and_recursion_ends() -> None:
    class Address(Closed):
        street: str

    class Node(Closed):
        name: str
        children: list[Node] = Field(default_factory=list)
        home: Address | None = None

    class Address2(Closed):
        street: int

    class Node2(Closed):
        name: str
        children: list[Node2] = Field(default_factory=list)
        home: Address2 | None = None

    assert reader_accepts(schema(Node), schema(Node)).problems == []
    problems = reader_accepts(schema(Node2), schema(Node)).problems
    assert "/home/street: the reader reads integer, but the writer wrote string" in problems


def test_reader_accepts__literal_tag_change_is_refused() -> None:
    class A(Closed):
        kind: Literal["a", "b"]

    class B(Closed):
        kind: Literal["a"]

    assert reader_accepts(schema(A), schema(B)).problems == []
    assert reader_accepts(schema(B), schema(A)).problems == [
        '/kind: the reader does not accept "b", which the writer allowed'
    ]


# -- key paths of matches ---------------------------------------------------------------------


def test_undeclared_paths__names_typos_and_follows_nested_models() -> None:
    class Address(BaseModel):
        city: str

    class Signup(BaseModel):
        userId: int
        address: Address | None = None
        tags: dict[str, str] = Field(default_factory=dict)

    doc = schema(Signup)
    assert undeclared_paths(doc, {"userId": 1, "address": {"city": "x"}}) == []
    assert undeclared_paths(doc, {"userid": 1}) == ["/userid"]
    assert undeclared_paths(doc, {"address": {"town": "x"}}) == ["/address/town"]
    assert undeclared_paths(doc, {"tags": {"anything": "x"}}) == []
