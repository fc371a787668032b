"""Serialization of workflow inputs, outputs and step results with pydantic; no I/O.

A value is stored as JSON (`dump`) and read back into the annotated type (`load`). Without an
annotation the stored JSON itself is returned. Errors become structured JSON
({type, message, traceback}). NaN and ±Infinity are refused (`InvalidInput`, the rule of
`ripple.platform.events.topics.check_json`), never turned into `null` silently: JSON cannot hold
them.
So is a NUL character (U+0000) or a lone UTF-16 surrogate in any string or key: Postgres cannot
store either, and a value failing at commit would fail again on every recovery.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import traceback
import typing
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from pydantic import ConfigDict, PydanticUserError, TypeAdapter
from pydantic_core import PydanticSerializationError, to_json

from ripple.platform.events.topics import NUL_ESCAPE, check_json, surrogate_error

__all__ = [
    "NO_TYPE",
    "STORED_ERROR",
    "dump",
    "error_json",
    "load",
    "rebuild_error",
    "return_annotation",
    "validate",
]

#: Marker for "no usable annotation": values pass through as JSON.
NO_TYPE: Any = object()
_PLAIN = (str, int, float, bool, type(None))
#: pydantic turns NaN/±Infinity into `null` in JSON mode by default; keep them so that
#: `check_json` refuses them (models carry their own config and keep them already).
_KEEP_NON_FINITE = ConfigDict(ser_json_inf_nan="constants")
_NUL_ESCAPE = NUL_ESCAPE.encode()
#: Nesting bound of the non-finite check on stored values (inputs and payloads are checked
#: against RIPPLE_MAX_JSON_DEPTH where they enter; this only keeps the walk bounded).
_MAX_NESTING = 256


def _make_adapter(annotation: Any) -> TypeAdapter[Any]:
    try:
        return TypeAdapter(annotation, config=_KEEP_NON_FINITE)
    except PydanticUserError:  # a model or dataclass with a config of its own
        return TypeAdapter(annotation)


@lru_cache(maxsize=1024)
def _adapter(annotation: Any) -> TypeAdapter[Any]:
    return _make_adapter(annotation)


def _adapter_for(annotation: Any) -> TypeAdapter[Any] | None:
    if annotation is NO_TYPE or annotation is inspect.Parameter.empty or annotation is Any:
        return None
    try:
        return _adapter(annotation)
    except TypeError:  # unhashable annotation: build one without caching
        return _make_adapter(annotation)


def _checked(value: Any, field: str, max_depth: int) -> Any:
    # Rust-speed prefilter: NaN/±Infinity show as bare `NaN`/`Infinity` tokens, U+0000 as the
    # escape `\u0000`, and nesting needs brackets. Only a value that may break a rule (a string
    # holding "NaN" is a false alarm) is walked by check_json, which decides and names the
    # problem; the walk costs several times the conversion itself.
    try:
        text = to_json(value, inf_nan_mode="constants")
    except PydanticSerializationError:
        # A lone surrogate cannot be encoded as UTF-8: the walk names it as InvalidInput.
        check_json(value, field=field, max_depth=max_depth)
        raise
    deep = len(text) > max_depth and text.count(b"[") + text.count(b"{") > max_depth
    if deep or b"NaN" in text or b"Infinity" in text or _NUL_ESCAPE in text:
        check_json(value, field=field, max_depth=max_depth)
    return value


def _json_form(adapter: TypeAdapter[Any], value: Any, field: str) -> Any:
    try:
        return adapter.dump_python(value, mode="json")
    except UnicodeEncodeError:  # JSON mode encodes object keys as UTF-8: a lone surrogate fails
        raise surrogate_error(field) from None


def dump(
    value: Any, annotation: Any = NO_TYPE, *, field: str = "value", max_depth: int = _MAX_NESTING
) -> Any:
    """JSON-compatible form of `value` (validated against `annotation` when given).

    Raises InvalidInput (naming `field`) for NaN or ±Infinity anywhere in it, for a NUL
    character (U+0000) or a lone UTF-16 surrogate (neither of which Postgres can store) in any
    string or key, or for nesting deeper than `max_depth`.
    """
    if isinstance(value, _PLAIN):
        checked = isinstance(value, float) or (
            isinstance(value, str) and ("\x00" in value or not value.isascii())
        )
        return _checked(value, field, max_depth) if checked else value
    adapter = _adapter_for(annotation)
    if adapter is None:
        adapter = _adapter_for(type(value))
    assert adapter is not None
    return _checked(_json_form(adapter, value, field), field, max_depth)


def load(data: Any, annotation: Any = NO_TYPE) -> Any:
    """`data` (stored JSON) as an instance of `annotation`; raises pydantic ValidationError."""
    adapter = _adapter_for(annotation)
    if adapter is None:
        return data
    return adapter.validate_python(data)


def validate(
    value: Any, annotation: Any = NO_TYPE, *, field: str = "value", max_depth: int = _MAX_NESTING
) -> Any:
    """Validate a caller's value (model instance or raw JSON) and return its JSON form.

    Raises pydantic ValidationError, or InvalidInput as `dump` does.
    """
    adapter = _adapter_for(annotation)
    if adapter is None:
        return dump(value, field=field, max_depth=max_depth)
    validated = adapter.validate_python(value)
    return _checked(_json_form(adapter, validated, field), field, max_depth)


@lru_cache(maxsize=4096)
def _hints(fn: Callable[..., Any]) -> Any:
    try:
        return typing.get_type_hints(fn).get("return", NO_TYPE)
    except Exception:  # unresolvable forward refs: fall back to raw JSON
        return NO_TYPE


def return_annotation(fn: Callable[..., Any]) -> Any:
    """The return annotation of `fn` (resolved), or NO_TYPE."""
    try:
        hint = _hints(fn)
    except TypeError:  # unhashable callable
        return NO_TYPE
    if hint is type(None):
        return NO_TYPE
    return hint


def error_json(exc: BaseException) -> dict[str, Any]:
    """Structured JSON of an exception: {type, message, traceback} (+ where its class lives)."""
    stored = getattr(exc, STORED_ERROR, None)
    if isinstance(stored, dict):
        return stored
    cls = type(exc)
    # Postgres cannot store U+0000: spelled out, so an error message holding one is recorded.
    return {
        "type": cls.__name__,
        "message": str(exc).replace("\x00", "\\x00"),
        "traceback": "".join(traceback.format_exception(exc))[-8000:].replace("\x00", "\\x00"),
        "module": cls.__module__,
        "qualname": cls.__qualname__,
    }


#: Attribute carrying the stored error JSON on a rebuilt exception.
STORED_ERROR = "__ripple_error__"


def rebuild_error(error: dict[str, Any]) -> Exception | None:
    """An exception of the recorded class with the recorded message (for replays), or None
    when the class cannot be found. `__init__` is bypassed: only `args` are set."""
    module_name, qualname = error.get("module"), error.get("qualname")
    if not isinstance(module_name, str) or not isinstance(qualname, str):
        return None
    module = sys.modules.get(module_name)
    if module is None:
        try:
            module = importlib.import_module(module_name)
        except Exception:
            return None
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
        if target is None:
            return None
    if not (isinstance(target, type) and issubclass(target, Exception)):
        return None
    try:
        exc: Exception = target.__new__(target)
        exc.args = (error.get("message", ""),)
        setattr(exc, STORED_ERROR, error)
    except Exception:
        return None
    return exc
