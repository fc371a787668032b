"""Request limits enforced on the raw ASGI stream, before the routes parse: body size, content
type, JSON depth and strict JSON.

The body is counted as it streams in (and refused early when `Content-Length` already says too
much), so an oversized request never reaches a JSON parser; then the nesting depth of a JSON body
is measured on the bytes, so a deeply nested document cannot exhaust the parser's recursion.
A body that is not JSON by its `Content-Type` is a 415. A JSON body is then read once strictly:
not UTF-8 or an integer over 4,300 digits is a 400 `bad-request`; a duplicate object key, NaN,
±Infinity or a lone UTF-16 surrogate escape (`"\\ud800"`) is a 422 (JSON has no NaN; with
duplicates the value a reader sees depends on the reader; a lone surrogate is no Unicode
character, so no UTF-8 text or Postgres value can hold it). Syntax errors are left to the
route's parser (400 `malformed-json`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ripple.platform.api.problems import problem_response

#: Longest request target (path and query) answered normally; longer ones get 414, at any
#: length (ripple.platform.api.http_protocol answers targets longer than the head limit).
MAX_URI_BYTES: Final = 8 * 1024
#: Longest request head (request line and header lines) `ripple serve` reads; a longer one is
#: refused (414 when its target is over `MAX_URI_BYTES`, else 431) and the connection closed.
MAX_REQUEST_HEAD_BYTES: Final = 256 * 1024

__all__ = ["RequestLimits", "json_depth", "strict_json_problem", "uri_too_long"]

_OPEN: Final = frozenset(b"[{")
_CLOSE: Final = frozenset(b"]}")
_QUOTE: Final = ord('"')
_BACKSLASH: Final = ord("\\")
#: The escape of a UTF-16 surrogate (`\ud800` to `\udfff`): only a body holding one can
#: decode to a lone surrogate (UTF-8 bytes of one are refused by the decoder).
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F]")


def uri_too_long(size: int, instance: str, *, complete: bool = True) -> JSONResponse:
    """The 414 problem for a request target of `size` bytes (`complete=False`: at least)."""
    length = f"{size} bytes" if complete else f"over {size} bytes"
    return problem_response(
        414,
        f"request URI is {length}, longer than {MAX_URI_BYTES}: send large values in a "
        "request body",
        instance=instance,
    )


def json_depth(data: bytes, limit: int) -> int:
    """Deepest `[`/`{` nesting in JSON text (strings skipped); stops counting past `limit`.

    The text need not be valid JSON; the parser reports syntax errors later.
    """
    if data.count(b"[") + data.count(b"{") <= limit:
        # Cannot exceed the limit; report a lower bound cheaply.
        return min(data.count(b"[") + data.count(b"{"), limit)
    depth = deepest = 0
    in_string = escaped = False
    for byte in data:
        if in_string:
            if escaped:
                escaped = False
            elif byte == _BACKSLASH:
                escaped = True
            elif byte == _QUOTE:
                in_string = False
        elif byte == _QUOTE:
            in_string = True
        elif byte in _OPEN:
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif byte in _CLOSE:
            depth -= 1
    return deepest


class _NotStrict(Exception):
    """A JSON document Python's parser accepts but Ripple refuses (422)."""


def _refuse_constant(name: str) -> Any:
    raise _NotStrict(f"{name} is not JSON; send a number or null")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _NotStrict(f"duplicate key {key!r} in a JSON object; send each key once")
            seen.add(key)
    return value


def strict_json_problem(body: bytes) -> tuple[int, str] | None:
    """(status, detail) when `body` is JSON Ripple refuses; None when it is fine or malformed
    (syntax errors are reported by the route's parser)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return 400, f"request body is not UTF-8 ({exc.reason} at byte {exc.start})"
    try:
        value = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_refuse_constant)
    except _NotStrict as exc:
        return 422, str(exc)
    except json.JSONDecodeError:
        return None
    except ValueError:  # an integer over sys.get_int_max_str_digits() (4,300) digits
        return 400, "request body has an integer of more than 4300 digits; send it as a string"
    except RecursionError:
        return None  # bounded by the depth check before; the route's parser reports it
    if _SURROGATE_ESCAPE.search(body) is not None:
        try:
            json.dumps(value, ensure_ascii=False).encode()
        except UnicodeEncodeError:
            return 422, (
                "request body has a lone UTF-16 surrogate escape (\\ud800 to \\udfff without "
                "its pair) in a JSON string, which is not Unicode text; send the whole pair or "
                "the character itself"
            )
    return None


class _TooLarge(Exception):
    pass


#: Bytes of an oversized body read and dropped before answering 413 (then the connection closes).
_DRAIN_LIMIT: Final = 64 * 1024 * 1024


class RequestLimits:
    """ASGI middleware: 413 above `max_body_bytes`, 422 for JSON nested deeper than `max_depth`."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, max_depth: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_depth = max_depth

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            target = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
            if target > MAX_URI_BYTES:
                await uri_too_long(target, scope.get("path", ""))(scope, receive, send)
                return
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
            await self._too_large(scope, receive, send, path)
            return
        try:
            body = await self._read(receive)
        except _TooLarge:
            await self._too_large(scope, receive, send, path)
            return
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        is_json = content_type in (b"", b"application/json") or content_type.endswith(b"+json")
        response = self._check(body, is_json, content_type, path)
        if response is not None:
            await response(scope, receive, send)
            return

        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _check(
        self, body: bytes, is_json: bool, content_type: bytes, path: str
    ) -> JSONResponse | None:
        """The problem response for a body the routes must not see, or None."""
        if not body:
            return None
        if content_type == b"application/x-www-form-urlencoded" and path.startswith(
            ("/ui/", "/approve/")
        ):
            return None  # the dashboard's and the approval page's forms (size-limited above)
        if not is_json:
            shown = content_type.decode("latin-1")
            return problem_response(
                415,
                f"request bodies are JSON: send Content-Type: application/json (got {shown})",
                instance=path,
            )
        if json_depth(body, self.max_depth) > self.max_depth:
            return problem_response(
                422,
                f"JSON nested deeper than {self.max_depth} levels "
                "(RIPPLE_MAX_JSON_DEPTH); flatten the document",
                instance=path,
                slug="json-too-deep",
                title="JSON too deep",
            )
        problem = strict_json_problem(body)
        if problem is None:
            return None
        status, detail = problem
        return problem_response(status, detail, instance=path)

    async def _read(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _TooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        return b"".join(chunks)

    async def _too_large(self, scope: Scope, receive: Receive, send: Send, path: str) -> None:
        # Read (and drop) the rest of the body first, up to a bound: a client still sending when
        # the connection closes sees a reset instead of this 413. Past the bound we answer anyway.
        drained = 0
        more = True
        while more and drained < _DRAIN_LIMIT:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            drained += len(message.get("body", b""))
            more = bool(message.get("more_body", False))
        response = problem_response(
            413,
            f"request body is larger than {self.max_body_bytes} bytes (RIPPLE_MAX_BODY_BYTES)",
            instance=path,
            headers={"Connection": "close"},
        )
        await response(scope, receive, send)
