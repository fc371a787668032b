"""Request limits enforced on the raw ASGI stream, before any parsing: body size and JSON depth.

The body is counted as it streams in (and refused early when `Content-Length` already says too
much), so an oversized request never reaches a JSON parser; then the nesting depth of a JSON body
is measured on the bytes, so a deeply nested document cannot exhaust the parser's recursion.
"""

from __future__ import annotations

from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ripple.platform.api.problems import problem_response

__all__ = ["RequestLimits", "json_depth"]

_OPEN: Final = frozenset(b"[{")
_CLOSE: Final = frozenset(b"]}")
_QUOTE: Final = ord('"')
_BACKSLASH: Final = ord("\\")


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
        if body and is_json and json_depth(body, self.max_depth) > self.max_depth:
            response = problem_response(
                422,
                f"JSON nested deeper than {self.max_depth} levels "
                "(RIPPLE_MAX_JSON_DEPTH); flatten the document",
                instance=path,
                slug="json-too-deep",
                title="JSON too deep",
            )
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
