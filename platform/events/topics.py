"""Topic names, subscription patterns, payload filters: pure rules and a compiled matcher.

Owns the grammar (DESIGN "Topics and subscriptions"), the AMQP-style pattern matcher (`*` is one
segment, `#` zero or more), and JSON containment with the semantics of Postgres `jsonb @>`. It
does no I/O and imports no driver.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from ripple.platform.errors import InvalidInput

__all__ = [
    "MAX_NAME_LENGTH",
    "NUL_ESCAPE",
    "Pattern",
    "check_json",
    "compile_pattern",
    "contains",
    "encode_json",
    "encode_json_items",
    "first_mismatch",
    "nul_error",
    "surrogate_error",
    "validate_pattern",
    "validate_topic",
]

MAX_NAME_LENGTH: Final = 255
_SEGMENT: Final = re.compile(r"[a-z0-9_-]+")


def _check_length(kind: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{kind} must be a string, got {type(value).__name__}", field=kind)
    if not value:
        raise InvalidInput(f"{kind} must not be empty (e.g. 'user.signup')", field=kind)
    if len(value) > MAX_NAME_LENGTH:
        raise InvalidInput(
            f"{kind} is {len(value)} characters long; the limit is {MAX_NAME_LENGTH}", field=kind
        )
    return value


def validate_topic(topic: object) -> str:
    """Return `topic` if it is a valid topic name, else raise `InvalidInput` saying why.

    A topic is dot-separated segments of `[a-z0-9_-]`, 1-255 characters, without wildcards.
    """
    value = _check_length("topic", topic)
    for index, segment in enumerate(value.split(".")):
        if segment in ("*", "#"):
            raise InvalidInput(
                f"topic {value!r} contains the wildcard {segment!r}: wildcards belong in "
                "subscription patterns; publish to a concrete topic such as 'user.signup'",
                field="topic",
            )
        _check_segment("topic", value, index, segment)
    return value


def validate_pattern(pattern: object) -> str:
    """Return `pattern` if valid, else raise `InvalidInput` saying why.

    A pattern is a topic whose segments may also be `*` (exactly one segment) or `#` (zero or
    more segments); wildcards are whole segments only.
    """
    value = _check_length("pattern", pattern)
    for index, segment in enumerate(value.split(".")):
        if segment in ("*", "#"):
            continue
        if "*" in segment or "#" in segment:
            raise InvalidInput(
                f"pattern {value!r}: segment {index + 1} ({segment!r}) mixes a wildcard with "
                "text; wildcards are whole segments, e.g. 'user.*' or 'billing.#'",
                field="pattern",
            )
        _check_segment("pattern", value, index, segment)
    return value


def _check_segment(kind: str, value: str, index: int, segment: str) -> None:
    if not segment:
        raise InvalidInput(
            f"{kind} {value!r} has an empty segment at position {index + 1}: no leading, "
            "trailing or doubled dots",
            field=kind,
        )
    if not _SEGMENT.fullmatch(segment):
        bad = next(ch for ch in segment if not _SEGMENT.fullmatch(ch))
        raise InvalidInput(
            f"{kind} {value!r}: segment {index + 1} ({segment!r}) contains {bad!r}; segments "
            "use only lowercase letters, digits, '_' and '-'",
            field=kind,
        )


@dataclass(frozen=True, slots=True)
class Pattern:
    """A compiled subscription pattern."""

    text: str
    segments: tuple[str, ...]
    #: Compiled for patterns with wildcards; exact patterns compare strings.
    regex: re.Pattern[str] | None

    def matches(self, topic: str) -> bool:
        """Whether `topic` (a valid topic name) matches this pattern."""
        if self.regex is None:
            return topic == self.text
        return self.regex.fullmatch("." + topic) is not None


@lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Pattern:
    """Compile a validated pattern into a matcher (cached)."""
    segments = tuple(validate_pattern(pattern).split("."))
    if "*" not in segments and "#" not in segments:
        return Pattern(pattern, segments, None)
    # Every segment carries its own leading dot and the topic is matched with one prepended,
    # so `#` can match nothing at all: `a.#.b` matches `a.b`, `a.x.b` and `a.x.y.b`.
    # Consecutive `#`s are one `#` (keeps the regex free of needless backtracking).
    parts: list[str] = []
    for index, segment in enumerate(segments):
        if segment == "#" and index and segments[index - 1] == "#":
            continue
        if segment == "*":
            parts.append(r"\.[a-z0-9_-]+")
        elif segment == "#":
            parts.append(r"(?:\.[a-z0-9_-]+)*")
        else:
            parts.append(r"\." + re.escape(segment))
    regex = "".join(parts)
    return Pattern(pattern, segments, re.compile(regex))


# -- JSON payloads and filters -------------------------------------------------------------


def check_json(value: Any, *, field: str, max_depth: int, max_bytes: int | None = None) -> int:
    """Check that `value` is JSON within the depth (and size) limits; return its encoded size.

    Raises `InvalidInput` naming the limit (or NaN/±Infinity, or a NUL character or a lone
    UTF-16 surrogate, which Postgres cannot store), so callers can reject before writing
    anything.
    """
    _check_depth(value, field, max_depth, 1)
    if max_bytes is None:
        return 0
    try:
        size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{field} is not JSON-serialisable: {exc}", field=field) from None
    if size > max_bytes:
        raise InvalidInput(
            f"{field} is {size} bytes of JSON; the limit is {max_bytes} bytes", field=field
        )
    return size


#: What `json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)` uses,
#: built once: `json.dumps` with options builds an encoder per call.
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode_json(value: Any, *, field: str, max_depth: int, max_bytes: int) -> str:
    """`value` as compact JSON text, checked against the depth and size limits.

    Cheaper than `check_json` plus a second encoding: the nesting walk runs only when the text
    has enough brackets to possibly exceed `max_depth`.
    """
    try:
        text = _COMPACT.encode(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"{field} is not JSON: {exc}", field=field) from None
    # json.dumps escapes U+0000 as `\u0000`; only then (or for deep values) is the value walked.
    if text.count("{") + text.count("[") > max_depth or NUL_ESCAPE in text:
        _check_depth(value, field, max_depth, 1)
    elif isinstance(value, dict | list):
        _check_keys(value, field)
    try:
        size = _utf8_size(text)
    except UnicodeEncodeError:
        raise surrogate_error(field) from None
    if size > max_bytes:
        raise InvalidInput(
            f"{field} is {size} bytes of JSON; the limit is {max_bytes} bytes", field=field
        )
    return text


def _utf8_size(text: str) -> int:
    """Bytes of `text` in UTF-8 (no encoding for ASCII text, the common case).

    Raises `UnicodeEncodeError` for a lone surrogate, which UTF-8 cannot encode.
    """
    return len(text) if text.isascii() else len(text.encode())


# A JSON string as json.dumps writes it, and a container holding no other container.
_JSON_STRING: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_INNERMOST: Final = re.compile(r"[\[{][^\[\]{}]*[\]}]")


def encode_json_items(values: Sequence[Any], *, max_depth: int, max_bytes: int) -> str | None:
    """`values` as one JSON array text if every item passes `encode_json`'s checks; else None.

    One C-level encode and decode for the whole batch instead of a call and a Python key walk
    per item (a batch of small bodies spent most of its client CPU there). None means "not
    vouched for" (a failing item, or one this cheap test cannot clear, such as a tuple): the
    caller then encodes item by item, which names the item and the limit.
    """
    items = list(values)
    try:
        text = _COMPACT.encode(items)
    except (TypeError, ValueError):
        return None
    # The whole array within the size limit bounds every item; U+0000 and lone surrogates
    # need the precise walk.
    try:
        size = _utf8_size(text)
    except UnicodeEncodeError:
        return None
    if size > max_bytes or NUL_ESCAPE in text:
        return None
    # Depth: with strings removed, each pass drops the containers that hold no container, so
    # the array (one level above its items) is gone after at most max_depth + 1 passes.
    skeleton = _JSON_STRING.sub("", text)
    for _ in range(max_depth + 1):
        skeleton, found = _INNERMOST.subn("", skeleton)
        if not found:
            break
    if "[" in skeleton or "{" in skeleton:
        return None
    # json.dumps writes int/float/bool/None keys as strings silently: decoded, such a dict no
    # longer equals the original (nor does a tuple, which the item walk judges instead).
    if json.loads(text) != items:
        return None
    return text


#: How JSON encoders spell U+0000 (json.dumps and pydantic-core alike).
NUL_ESCAPE: Final = "\\u0000"


def nul_error(field: str) -> InvalidInput:
    """The error for U+0000 in a value: neither Postgres `jsonb` nor `text` can store it."""
    return InvalidInput(
        f"{field} contains the NUL character (U+0000), which Postgres cannot store; remove it "
        "or encode the data (for example as base64)",
        field=field,
    )


#: A UTF-16 surrogate code point: JSON may spell one alone (`"\ud800"`), but it is no Unicode
#: character, so neither UTF-8 nor Postgres can hold it.
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def surrogate_error(field: str) -> InvalidInput:
    """The error for a lone UTF-16 surrogate in a value (`"\\ud800"` without its pair)."""
    return InvalidInput(
        f"{field} contains a lone UTF-16 surrogate (U+D800 to U+DFFF without its pair), which "
        "is not Unicode text; send the whole surrogate pair, the character itself, or encode "
        "the data (for example as base64)",
        field=field,
    )


def _has_surrogate(text: str) -> bool:
    return not text.isascii() and _SURROGATE.search(text) is not None


_CONTAINERS: Final = (dict, list)


def _check_keys(value: dict[Any, Any] | list[Any], field: str) -> None:
    # json.dumps turns int/float/bool/None keys into strings silently; refuse them instead.
    # Runs for every payload and body, so it calls itself for containers only.
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"{field} has a non-string object key {key!r}", field=field)
            if isinstance(item, _CONTAINERS):
                _check_keys(item, field)
    else:
        for item in value:
            if isinstance(item, _CONTAINERS):
                _check_keys(item, field)


def _check_depth(value: Any, field: str, max_depth: int, depth: int) -> None:
    if isinstance(value, dict):
        if depth > max_depth:
            raise InvalidInput(
                f"{field} nests deeper than {max_depth} levels; flatten it", field=field
            )
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidInput(f"{field} has a non-string object key {key!r}", field=field)
            if "\x00" in key:
                raise nul_error(field)
            if _has_surrogate(key):
                raise surrogate_error(field)
            _check_depth(item, field, max_depth, depth + 1)
    elif isinstance(value, list | tuple):
        if depth > max_depth:
            raise InvalidInput(
                f"{field} nests deeper than {max_depth} levels; flatten it", field=field
            )
        for item in value:
            _check_depth(item, field, max_depth, depth + 1)
    else:
        _check_scalar(value, field)


def _check_scalar(value: Any, field: str) -> None:
    if isinstance(value, str):
        if "\x00" in value:
            raise nul_error(field)
        if _has_surrogate(value):
            raise surrogate_error(field)
    elif value is None or isinstance(value, bool | int):
        return
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidInput(f"{field} contains {value!r}, which JSON cannot hold", field=field)
    else:
        raise InvalidInput(
            f"{field} contains a {type(value).__name__}, which is not JSON; send dicts, "
            "lists, strings, numbers, booleans or null",
            field=field,
        )


def _scalar_equal(left: Any, right: Any) -> bool:
    # jsonb keeps booleans and numbers apart (Python's True == 1 does not hold there).
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return left == right
    return type(left) is type(right) and bool(left == right)


def contains(value: Any, sub: Any, *, top: bool = True) -> bool:
    """`value @> sub` with Postgres jsonb semantics.

    Objects contain objects whose every key is contained; arrays contain arrays whose every
    element is contained in some element (order and duplicates ignored); scalars compare equal;
    a top-level array also contains a bare scalar that is one of its elements.
    """
    if isinstance(sub, dict):
        if not isinstance(value, dict):
            return False
        return all(
            key in value and contains(value[key], item, top=False) for key, item in sub.items()
        )
    if isinstance(sub, list | tuple):
        if not isinstance(value, list | tuple):
            return False
        return all(_array_has(value, item) for item in sub)
    if isinstance(value, dict):
        return False
    if isinstance(value, list | tuple):
        return top and any(
            not isinstance(item, dict | list | tuple) and _scalar_equal(item, sub) for item in value
        )
    return _scalar_equal(value, sub)


def _array_has(array: Sequence[Any], item: Any) -> bool:
    if isinstance(item, dict | list | tuple):
        # A container matches a container element of the same shape that contains it.
        return any(
            isinstance(elem, dict | list | tuple) and contains(elem, item, top=False)
            for elem in array
        )
    return any(
        not isinstance(elem, dict | list | tuple) and _scalar_equal(elem, item) for elem in array
    )


def first_mismatch(value: Any, sub: Any, path: str = "") -> str | None:
    """The first key path (e.g. `user.plan`) where `value` does not contain `sub`, else None."""
    if contains(value, sub):
        return None
    if isinstance(sub, dict) and isinstance(value, dict):
        for key, item in sub.items():
            where = f"{path}.{key}" if path else key
            if key not in value:
                return where
            if not contains(value[key], item, top=False):
                deeper = first_mismatch(value[key], item, where)
                return deeper or where
    return path or "$"
