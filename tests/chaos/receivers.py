"""Webhook receivers that misbehave, as raw asyncio HTTP/1.1 servers (no framework in the way).

`AbusiveReceiver` answers by path: `/ok` (a normal 200), `/close` (a 200 that closes the
connection), `/endless` (a chunked body that never
ends, written as fast as the client takes it), `/trickle` (the whole response, status line
included, one byte per second), `/trickle-body` (headers at once, then the body one byte per
second), `/big` (a 50 MB body with its Content-Length). It counts requests and the bytes it
managed to write per path.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable

__all__ = ["BIG_BODY", "AbusiveReceiver"]

BIG_BODY = 50 * 1024 * 1024
_CHUNK = b"abuse\x00" * (64 * 1024 // 6)  # NULs too: the stored excerpt must drop them


class AbusiveReceiver:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self.requests: Counter[str] = Counter()
        self.written: Counter[str] = Counter()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._modes: dict[str, Callable[[asyncio.StreamWriter], Awaitable[None]]] = {
            "/ok": self._ok,
            "/close": self._close,
            "/endless": self._endless,
            "/trickle": self._trickle,
            "/trickle-body": self._trickle_body,
            "/big": self._big,
        }

    def url(self, path: str, host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}{path}"

    async def start(self, port: int = 0) -> AbusiveReceiver:
        self._server = await asyncio.start_server(self._accept, self.host, port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while True:  # keep-alive: one request after another on this connection
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1].decode()
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                await reader.readexactly(length)
                self.requests[path] += 1
                await self._modes[path](writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, OSError):
            pass
        finally:
            self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _send(self, writer: asyncio.StreamWriter, path: str, data: bytes) -> None:
        writer.write(data)
        await writer.drain()
        self.written[path] += len(data)

    async def _ok(self, writer: asyncio.StreamWriter) -> None:
        await self._send(writer, "/ok", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        """A normal 200 that closes the connection: the client's next request reconnects."""
        ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
        await self._send(writer, "/close", ok)
        raise ConnectionResetError("closed after the response")

    async def _endless(self, writer: asyncio.StreamWriter) -> None:
        await self._send(
            writer, "/endless", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        frame = f"{len(_CHUNK):x}\r\n".encode() + _CHUNK + b"\r\n"
        while True:
            await self._send(writer, "/endless", frame)

    async def _trickle(self, writer: asyncio.StreamWriter) -> None:
        response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
        for i in range(len(response)):
            await self._send(writer, "/trickle", response[i : i + 1])
            await asyncio.sleep(1.0)  # the abuse itself: one byte per second

    async def _trickle_body(self, writer: asyncio.StreamWriter) -> None:
        await self._send(
            writer, "/trickle-body", b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
        )
        for _ in range(1000):
            await self._send(writer, "/trickle-body", b"x")
            await asyncio.sleep(1.0)

    async def _big(self, writer: asyncio.StreamWriter) -> None:
        await self._send(
            writer, "/big", f"HTTP/1.1 200 OK\r\nContent-Length: {BIG_BODY}\r\n\r\n".encode()
        )
        sent = 0
        while sent < BIG_BODY:
            part = _CHUNK[: BIG_BODY - sent]
            await self._send(writer, "/big", part)
            sent += len(part)
