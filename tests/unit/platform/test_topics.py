"""Topic/pattern rules, the matcher against a reference implementation, JSON containment."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ripple.platform.errors import InvalidInput
from ripple.platform.events.topics import (
    check_json,
    compile_pattern,
    contains,
    encode_json,
    first_mismatch,
    validate_pattern,
    validate_topic,
)


def reference_match(pattern: list[str], topic: list[str]) -> bool:
    """Obvious recursive AMQP matcher: `*` one segment, `#` zero or more."""
    if not pattern:
        return not topic
    head, rest = pattern[0], pattern[1:]
    if head == "#":
        return any(reference_match(rest, topic[i:]) for i in range(len(topic) + 1))
    if not topic:
        return False
    return (head == "*" or head == topic[0]) and reference_match(rest, topic[1:])


WORDS = st.sampled_from(["a", "b", "c", "user", "x-1", "n_2"])
TOPICS = st.lists(WORDS, min_size=1, max_size=6)
PATTERNS = st.lists(st.one_of(WORDS, st.just("*"), st.just("#")), min_size=1, max_size=6)


@settings(max_examples=2000, deadline=None)
@given(pattern=PATTERNS, topic=TOPICS)
def test_matcher__agrees_with_reference(pattern: list[str], topic: list[str]) -> None:
    compiled = compile_pattern(".".join(pattern))
    assert compiled.matches(".".join(topic)) == reference_match(pattern, topic)


@pytest.mark.parametrize(
    ("pattern", "topic", "expected"),
    [
        ("user.*", "user.signup", True),
        ("user.*", "user", False),
        ("user.*", "user.a.b", False),
        ("billing.#", "billing", True),
        ("billing.#", "billing.paid", True),
        ("billing.#", "billing.invoice.paid", True),
        ("#", "anything.at.all", True),
        ("a.#.b", "a.b", True),
        ("a.#.b", "a.x.y.b", True),
        ("a.#.b", "ab", False),
        ("user.signup", "user.signup", True),
        ("user.signup", "user.signups", False),
    ],
)
def test_matcher__design_examples(pattern: str, topic: str, expected: bool) -> None:
    assert compile_pattern(pattern).matches(topic) is expected


@pytest.mark.parametrize(
    ("topic", "message"),
    [
        ("", "must not be empty"),
        ("User.signup", "contains 'U'"),
        ("user..signup", "empty segment at position 2"),
        ("user.", "empty segment"),
        ("user.*", "wildcard '*'"),
        ("user.#", "wildcard '#'"),
        ("a" * 256, "limit is 255"),
        ("user signup", "contains ' '"),
    ],
)
def test_validate_topic__says_what_is_wrong(topic: str, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        validate_topic(topic)
    assert message in info.value.message
    assert info.value.field == "topic"


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("user.sign*", "mixes a wildcard"),
        ("#user", "mixes a wildcard"),
        ("user..x", "empty segment"),
        ("", "must not be empty"),
    ],
)
def test_validate_pattern__says_what_is_wrong(pattern: str, message: str) -> None:
    with pytest.raises(InvalidInput) as info:
        validate_pattern(pattern)
    assert message in info.value.message


def test_validate__accepts_grammar() -> None:
    assert validate_topic("billing.invoice.paid") == "billing.invoice.paid"
    assert validate_topic("a-b_c.0") == "a-b_c.0"
    assert validate_pattern("#.*.x") == "#.*.x"


@pytest.mark.parametrize(
    ("value", "sub", "expected"),
    [
        ({"a": 1, "b": 2}, {"a": 1}, True),
        ({"a": 1}, {"a": 1.0}, True),
        ({"a": True}, {"a": 1}, False),
        ({"a": 1}, {"a": True}, False),
        ({"a": [1, 2, 3]}, {"a": [3, 1]}, True),
        ({"a": [1, 2]}, {"a": 1}, False),
        ({"a": {"b": {"c": 1, "d": 2}}}, {"a": {"b": {"c": 1}}}, True),
        ({"a": [{"x": 1, "y": 2}]}, {"a": [{"x": 1}]}, True),
        ({"a": None}, {"a": None}, True),
        ({}, {"a": None}, False),
        ([1, 2], 1, True),
        ({"a": "1"}, {"a": 1}, False),
    ],
)
def test_contains__postgres_semantics(value: object, sub: object, expected: bool) -> None:
    assert contains(value, sub) is expected


def test_first_mismatch__names_the_key() -> None:
    assert first_mismatch({"user": {"plan": "free"}}, {"user": {"plan": "pro"}}) == "user.plan"
    assert first_mismatch({"a": 1}, {"b": 1}) == "b"
    assert first_mismatch({"a": 1}, {"a": 1}) is None


def test_check_json__limits() -> None:
    deep: object = 1
    for _ in range(10):
        deep = {"k": deep}
    with pytest.raises(InvalidInput, match="nests deeper than 5 levels"):
        check_json(deep, field="payload", max_depth=5)
    with pytest.raises(InvalidInput, match="limit is 10 bytes"):
        check_json({"a": "x" * 20}, field="payload", max_depth=5, max_bytes=10)
    with pytest.raises(InvalidInput, match="set"):
        check_json({"a": {1, 2}}, field="payload", max_depth=5)
    assert check_json({"a": [1, 2]}, field="payload", max_depth=5, max_bytes=100) == 11


def test_encode_json__checks_limits_and_returns_text() -> None:
    assert encode_json({"a": [1, "é"]}, field="body", max_depth=4, max_bytes=100) == '{"a":[1,"é"]}'
    with pytest.raises(InvalidInput, match="not JSON"):
        encode_json({"a": float("nan")}, field="body", max_depth=4, max_bytes=100)
    for keyed in ({"a": {1: 2}}, [{"b": [{None: 1}]}], {"a": [1, {"b": {2.5: 1}}]}):
        with pytest.raises(InvalidInput, match="non-string object key"):
            encode_json(keyed, field="body", max_depth=4, max_bytes=100)
    with pytest.raises(InvalidInput, match="nests deeper than 2"):
        encode_json([[[1]]], field="body", max_depth=2, max_bytes=100)
    with pytest.raises(InvalidInput, match="limit is 5 bytes"):
        encode_json("éééé", field="body", max_depth=2, max_bytes=5)
    # Brackets inside strings do not count as nesting.
    assert encode_json({"s": "[[[[[["}, field="body", max_depth=2, max_bytes=100)
