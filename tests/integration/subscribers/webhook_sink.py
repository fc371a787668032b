"""A real local HTTP sink for webhook tests: `asyncio.start_server` speaking minimal HTTP/1.1.

Each request is recorded; a `responder` decides the answer (status, headers, body), and may
never answer at all (a slow sink). Keep-alive is supported so pooling is exercised.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = ["Received", "Reply", "Sink", "signal_on"]


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass(frozen=True)
class Reply:
    status: int = 204
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""


Responder = Callable[[Received, int], Awaitable[Reply] | Reply]


def signal_on(event: asyncio.Event, request: int) -> Responder:
    """A responder answering 204 that sets `event` once the `request`-th request (from 1)
    arrived."""

    def reply(_req: Received, n: int) -> Reply:
        if n == request:
            event.set()
        return Reply()

    return reply


_REASONS = {
    200: "OK",
    204: "No Content",
    302: "Found",
    410: "Gone",
    429: "Too Many Requests",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


class Sink:
    def __init__(self, responder: Responder | None = None) -> None:
        self.responder: Responder = responder or (lambda _req, _n: Reply())
        self.received: list[Received] = []
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._closed = asyncio.Event()

    @classmethod
    def hung(cls) -> Sink:
        """A sink that never answers (each request waits until the sink closes)."""
        sink = cls()
        sink.responder = lambda _req, _n: sink.hang()
        return sink

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    def hang(self) -> Awaitable[Reply]:
        """An answer that never comes (until the sink closes)."""

        async def never() -> Reply:
            await self._closed.wait()
            raise ConnectionError("sink closed")

        return never()

    async def __aenter__(self) -> Sink:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._closed.set()
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _version = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        key, value = line.split(":", 1)
                        headers[key.strip().lower()] = value.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                request = Received(method, path, headers, body)
                self.received.append(request)
                reply = self.responder(request, len(self.received))
                if not isinstance(reply, Reply):
                    reply = await reply
                out = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Status')}"]
                out += [f"{k}: {v}" for k, v in reply.headers]
                out.append(f"content-length: {len(reply.body)}")
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + reply.body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()
