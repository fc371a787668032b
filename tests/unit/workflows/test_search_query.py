"""The run search language and approval tokens: pure parsing and signing."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from ripple.platform.errors import InvalidInput
from ripple.workflows.authoring.approvals import approval_url, sign_token, verify_token
from ripple.workflows.authoring.attributes import encode_attributes
from ripple.workflows.runs.search_query import And, Compare, In, Not, Or, parse_where
from ripple.workflows.store.search import compile_where


def test_parse_where__precedence_not_and_or() -> None:
    tree = parse_where('a = 1 or not b = "x" and c in [true, false]')
    assert tree == Or(
        (
            Compare("a", "=", Decimal(1)),
            And((Not(Compare("b", "=", "x")), In("c", (True, False), negated=False))),
        )
    )


def test_parse_where__aliases_escapes_and_timestamps() -> None:
    tree = parse_where("x == 'it\\'s' && (y != -1.5e2 || !z >= timestamp(\"2026-01-02\"))")
    assert tree == And(
        (
            Compare("x", "=", "it's"),
            Or(
                (
                    Compare("y", "!=", Decimal("-1.5e2")),
                    Not(Compare("z", ">=", datetime(2026, 1, 2, tzinfo=UTC))),
                )
            ),
        )
    )


@pytest.mark.parametrize(
    ("query", "position"),
    [
        ("", None),
        ("a =", 4),
        ("a = 1 and", 10),
        ("a = 'x", 5),
        ("a ~ 1", 3),
        ('a = timestamp("nope")', 15),
        ("a in []", 7),
        ("a = 1)", 6),
        ('a = "\\q"', 6),
    ],
)
def test_parse_where__errors_name_the_position(query: str, position: int | None) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_where(query)
    if position is not None:
        assert f"position {position}:" in refused.value.message


def test_parse_where__depth_and_length_are_bounded() -> None:
    with pytest.raises(InvalidInput, match="nested deeper"):
        parse_where("(" * 40 + "a = 1" + ")" * 40)
    with pytest.raises(InvalidInput, match="longer than"):
        parse_where("a = 1 or " * 1000 + "a = 1")


def test_compile_where__names_and_values_are_parameters_only() -> None:
    sql, params = compile_where(parse_where('x = "\'; drop table t; --" and workflow != "w"'))
    assert "drop" not in sql
    assert params == ["x", "'; drop table t; --", "w"]
    assert "$8::text" in sql
    assert "$9::text" in sql
    assert "r.workflow <> $10::text" in sql


@pytest.mark.parametrize(
    "query",
    ['workflow > "a"', "status = 1", "vip < true", 'x in [1, "a"]', 'created_at = "nope"'],
)
def test_compile_where__type_misuse_is_refused(query: str) -> None:
    with pytest.raises(InvalidInput):
        compile_where(parse_where(query))


def test_encode_attributes__types_and_declarations() -> None:
    when = datetime(2026, 1, 1, 12)
    assert encode_attributes({"a": "x", "b": 2, "c": 1.5, "d": True, "e": when}, None) == [
        {"name": "a", "type": "str", "value": "x"},
        {"name": "b", "type": "int", "value": 2},
        {"name": "c", "type": "float", "value": 1.5},
        {"name": "d", "type": "bool", "value": True},
        {"name": "e", "type": "datetime", "value": "2026-01-01T12:00:00+00:00"},
    ]
    declared = {"amount": "float"}
    assert encode_attributes({"amount": 3}, declared)[0]["type"] == "float"
    for bad in ({"amout": 3.0}, {"amount": "3"}):
        with pytest.raises(InvalidInput):
            encode_attributes(bad, declared)
    for bad_value in ({"x": [1]}, {"x": float("nan")}, {"status": "x"}, {"1x": 1}, {}):
        with pytest.raises(InvalidInput):
            encode_attributes(bad_value, None)


def test_approval_token__round_trips_and_refuses_tampering() -> None:
    key = b"k" * 32
    token = sign_token(key, "run-1", "refund-ok")
    assert verify_token(key, token) == ("run-1", "refund-ok")
    assert verify_token(b"other" * 8, token) is None
    head, tail = token.split(".")
    other_head = sign_token(key, "run-2", "refund-ok").split(".")[0]
    for forged in (f"{other_head}.{tail}", head, f"{head}.{tail[:-1]}", "", "a.b.c", "%%.%%"):
        assert verify_token(key, forged) is None


def test_approval_url__the_signed_page_on_the_public_url_or_relative() -> None:
    key = b"k" * 32
    token = sign_token(key, "run-1", "refund-ok")
    assert approval_url(None, key, "run-1", "refund-ok") == f"/approve/{token}"
    for base in ("https://ripple.example", "https://ripple.example/"):
        link = approval_url(base, key, "run-1", "refund-ok")
        assert link == f"https://ripple.example/approve/{token}"
