"""uvicorn's httptools protocol with the request-head promises `ripple serve` makes.

httptools (llhttp) spends less CPU per request than h11, but as uvicorn uses it it bounds no
request head (llhttp streams, and uvicorn and httptools accumulate the URL and each header
without limit) and answers a plain 400 to any request target over 64 KiB (`httptools.parse_url`
keeps 16-bit offsets). `BoundedHttpToolsProtocol` keeps the rest of uvicorn's protocol
(keep-alive, pipelining, flow control, graceful shutdown) and adds:

- a request target too long for `parse_url` reaches the app split as h11 splits it, so the
  app's `RequestLimits` answers its 414 problem at any length the head limit admits;
- a head over `MAX_REQUEST_HEAD_BYTES` is refused with a problem response (414 when the target
  alone is over `MAX_URI_BYTES`, else 431) after any earlier pipelined responses; the connection
  is then half-closed and what the client still sends is read and dropped (up to a bound and
  the keep-alive timeout), so it reads the answer rather than a reset and nothing is buffered.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final
from urllib.parse import unquote

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.server import ServerState

from ripple.platform.api.limits import MAX_REQUEST_HEAD_BYTES, MAX_URI_BYTES, uri_too_long
from ripple.platform.api.problems import problem_response

__all__ = ["BoundedHttpToolsProtocol"]

#: Bytes a refused client may still send (read and dropped) before the connection is closed.
_DISCARD_LIMIT: Final = 64 * 1024 * 1024
#: " HTTP/1.1\r\n" after the target, and the method's separator: a head's request line is at
#: least this much longer than its target.
_REQUEST_LINE_EXTRA: Final = 12
#: ": " and "\r\n" around each header's name and value.
_HEADER_LINE_EXTRA: Final = 4
#: Longest request target `httptools.parse_url` accepts (it keeps 16-bit offsets).
_PARSE_URL_MAX: Final = 0xFFFF


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing a head that is over the limit."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` with a bounded request head and 414 for long targets (module doc)."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        #: Bytes of the current request head read so far: exact while the head has spanned
        #: whole reads, else a lower bound (what the parser reported of it).
        self._head_bytes = 0
        #: Bytes of the reads the current head has spanned so far (an upper bound of its size).
        self._head_span = 0
        #: A head has begun and is not complete.
        self._in_head = False
        #: The current head began during the current read.
        self._head_began = False
        #: Bytes of the current read.
        self._read_bytes = 0
        #: The refusal to send once earlier responses are out; None when not refused.
        self._refusal: bytes | None = None
        self._refusal_sent = False
        self._discarded = 0

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            self._discard(len(data))
            return
        self._head_began = False
        self._read_bytes = len(data)
        super().data_received(data)
        if not self._in_head or self._refusal is not None:
            return
        if self._head_began:
            self._head_bytes = self._reported_head_bytes()
            self._head_span = len(data)
        else:
            self._head_bytes += len(data)
            self._head_span += len(data)
        if self._head_bytes > MAX_REQUEST_HEAD_BYTES:
            self._refuse(complete=False)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = self._head_span = 0
        self._in_head = True
        self._head_began = True

    def on_headers_complete(self) -> None:
        self._in_head = False
        # At most this much of the stream can be this head; count it exactly only when it
        # could be over the limit (never for ordinary requests).
        span = self._read_bytes if self._head_began else self._head_span + self._read_bytes
        if span > MAX_REQUEST_HEAD_BYTES and (
            max(self._head_bytes, self._reported_head_bytes()) > MAX_REQUEST_HEAD_BYTES
        ):
            self._refuse(complete=True)
            raise _HeadRefused  # stops the parser; `send_400_response` sends nothing then
        url = self.url
        if len(url) <= _PARSE_URL_MAX:
            super().on_headers_complete()
            return
        # `httptools.parse_url` fails on this target (uvicorn then answers a bare 400); the app
        # answers 414 to a target this long and reads only its path and query, split here as
        # h11 splits them.
        self.url = b"/"
        super().on_headers_complete()
        self.url = url
        raw_path, _, query = url.partition(b"?")
        self.scope["raw_path"] = self.root_path.encode("ascii") + raw_path
        self.scope["path"] = self.root_path + unquote(raw_path.decode("ascii"))
        self.scope["query_string"] = query

    def send_400_response(self, msg: str) -> None:
        if self._refusal is not None:
            return  # a refused head: the refusal is sent (or queued) already
        super().send_400_response(msg)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._refusal is not None and not self._refusal_sent and self._answered_all():
            self._send_refusal()

    def _answered_all(self) -> bool:
        """Every request before the refused head has its response written."""
        # `self.cycle` is the newest request's; pipelined ones are answered in order.
        return not self.pipeline and (self.cycle is None or self.cycle.response_complete)

    def _reported_head_bytes(self) -> int:
        """A lower bound of the current head's size from what the parser has reported."""
        size = len(self.url) + _REQUEST_LINE_EXTRA
        for name, value in self.headers:
            size += len(name) + len(value) + _HEADER_LINE_EXTRA
        return size

    def _refuse(self, *, complete: bool) -> None:
        """Answer the current head with 414 or 431 (once earlier responses are out)."""
        raw_path = self.url.partition(b"?")[0]
        instance = self.root_path + unquote(raw_path.decode("latin-1"))
        if len(self.url) > MAX_URI_BYTES:
            response = uri_too_long(len(self.url), instance, complete=complete)
        else:
            response = problem_response(
                431,
                f"request head is over {MAX_REQUEST_HEAD_BYTES} bytes: send large values in a "
                "request body",
                instance=instance,
            )
        content = [STATUS_LINE[response.status_code]]
        for name, value in self.server_state.default_headers:
            content += [name, b": ", value, b"\r\n"]
        for name, value in response.raw_headers:
            content += [name, b": ", value, b"\r\n"]
        content += [b"connection: close\r\n\r\n", bytes(response.body)]
        self._refusal = b"".join(content)
        if self._answered_all():
            self._send_refusal()
        else:
            self.flow.pause_reading()  # until the earlier responses are out

    def _send_refusal(self) -> None:
        """Write the refusal, half-close, and drop what the client still sends."""
        assert self._refusal is not None
        self._refusal_sent = True
        if self.transport.is_closing():
            return
        self.transport.write(self._refusal)
        if not self.transport.can_write_eof():
            self.transport.close()
            return
        self.transport.write_eof()
        self.flow.resume_reading()
        # The keep-alive timeout closes the connection if the client never does.
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def _discard(self, size: int) -> None:
        self._discarded += size
        if self._discarded > _DISCARD_LIMIT:
            self.transport.close()
