"""Search attributes: the values `ctx.set_attributes(...)` journals, their types and the check
against a workflow's optional declaration (`@workflow(attributes={"customer": str})`). Pure.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from ripple.platform.errors import InvalidInput

__all__ = ["ATTRIBUTE_TYPES", "check_declaration", "encode_attributes"]

#: Python type -> the type name stored with the value.
ATTRIBUTE_TYPES: Final[dict[type, str]] = {
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
    datetime: "datetime",
}

#: Attribute names: identifiers of the filter language, not one of its built-in fields or words.
NAME_RE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
RESERVED: Final = frozenset(
    {"workflow", "status", "created_at", "and", "or", "not", "in", "true", "false", "timestamp"}
)
MAX_TEXT: Final = 1024


def _type_name(value: Any) -> str:
    # bool before int: bool is an int subclass.
    for kind in (bool, int, float, str, datetime):
        if isinstance(value, kind):
            return ATTRIBUTE_TYPES[kind]
    raise InvalidInput(
        f"search attribute value {value!r} has type {type(value).__name__}: use str, int, "
        "float, bool or datetime"
    )


def check_name(name: str) -> str:
    """`name` if it can be an attribute name, else InvalidInput saying what to use."""
    if not NAME_RE.fullmatch(name) or name.lower() in RESERVED:
        raise InvalidInput(
            f"invalid search attribute name {name!r}: use letters, digits and '_' (1-64, not "
            f"starting with a digit), and none of {', '.join(sorted(RESERVED))}",
            field="attributes",
        )
    return name


def check_declaration(declared: Mapping[str, Any] | None) -> dict[str, str] | None:
    """A workflow's declared attributes as {name: type name}; InvalidInput on a bad one."""
    if declared is None:
        return None
    out: dict[str, str] = {}
    for name, kind in declared.items():
        check_name(name)
        if kind not in ATTRIBUTE_TYPES:
            raise InvalidInput(
                f"search attribute {name!r} is declared as {kind!r}: declare str, int, float, "
                "bool or datetime",
                field="attributes",
            )
        out[name] = ATTRIBUTE_TYPES[kind]
    return out


def encode_attributes(
    values: Mapping[str, Any], declared: Mapping[str, str] | None
) -> list[dict[str, Any]]:
    """The journal form of `values`: [{name, type, value}] (datetimes as UTC ISO text).

    Raises InvalidInput for a bad name, an unsupported type, a name the declaration does not
    list or a value of another type than declared (an int passes for a declared float).
    """
    if not values:
        raise InvalidInput("set_attributes needs at least one name=value")
    out: list[dict[str, Any]] = []
    for name, value in values.items():
        check_name(name)
        kind = _type_name(value)
        if declared is not None:
            expected = declared.get(name)
            if expected is None:
                known = ", ".join(sorted(declared)) or "none"
                raise InvalidInput(
                    f"search attribute {name!r} is not declared on this workflow (declared: "
                    f"{known}); add it to @workflow(attributes=...) or fix the name",
                    field=name,
                )
            if expected == "float" and kind == "int":
                kind = "float"
            if kind != expected:
                raise InvalidInput(
                    f"search attribute {name!r} is declared {expected}, got {kind} {value!r}",
                    field=name,
                )
        if kind == "float" and not math.isfinite(value):
            raise InvalidInput(f"search attribute {name!r} must be finite, got {value!r}")
        if kind == "str" and "\x00" in value:
            raise InvalidInput(f"search attribute {name!r} must not contain NUL (U+0000)")
        if kind == "str" and len(value) > MAX_TEXT:
            raise InvalidInput(f"search attribute {name!r} is longer than {MAX_TEXT} characters")
        if kind == "datetime":
            when = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
            value = when.astimezone(UTC).isoformat()
        out.append({"name": name, "type": kind, "value": value})
    return out
