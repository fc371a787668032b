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
    encode_json_items,
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


# JSON-ish values that trip every check: non-string keys, U+0000, brackets and escapes inside
# strings, NaN, nesting around the depth limit (tuples aside: the batch check leaves them to
# the item walk).
_KEYS = st.one_of(st.text(alphabet='ab[]{}"\\\x00', max_size=3), st.integers(0, 2), st.none())
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(allow_infinity=False),
    st.text(alphabet='ab[]{}"\\\x00é', max_size=4),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=3)),
    max_leaves=12,
)


def _item_by_item(items: list[object], max_depth: int, max_bytes: int) -> str | None:
    try:
        texts = [
            encode_json(i, field="body", max_depth=max_depth, max_bytes=max_bytes) for i in items
        ]
    except InvalidInput:
        return None
    return "[" + ",".join(texts) + "]"


@settings(max_examples=400, deadline=None)
@given(st.lists(_VALUES, min_size=1, max_size=4), st.integers(1, 4), st.integers(2, 60))
def test_encode_json_items__agrees_with_encode_json_item_by_item(
    items: list[object], max_depth: int, max_bytes: int
) -> None:
    # A whole-batch answer only when every item passes, and then the same text; None is the
    # caller's cue to run the item-by-item checks that name the failing item.
    text = encode_json_items(items, max_depth=max_depth, max_bytes=max_bytes)
    expected = _item_by_item(items, max_depth, max_bytes)
    if text is not None:
        assert text == expected
    elif expected is not None:
        # Only a batch over the size limit is left to the item walk although each item fits.
        assert len(expected.encode()) > max_bytes


def test_encode_json_items__refuses_what_encode_json_refuses() -> None:
    ok = {"a": [1, {"s": "]]}}[[", "e": '\\"['}]}
    assert encode_json_items([ok, ok], max_depth=3, max_bytes=200) == (
        "[" + ",".join([encode_json(ok, field="b", max_depth=3, max_bytes=200)] * 2) + "]"
    )
    for bad in ({1: "a"}, {"a": [{True: 1}]}, [[[[1]]]], "a\x00", float("nan"), {"a": {1, 2}}):
        assert encode_json_items([ok, bad], max_depth=3, max_bytes=200) is None, bad
    # Tuples encode as arrays; their keys are for the item walk to judge.
    assert encode_json_items([({1: 2},)], max_depth=3, max_bytes=200) is None
