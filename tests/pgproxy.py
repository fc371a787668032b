"""A TCP proxy in front of the shared Postgres that a test can stall or cut, so database
outages are tested without stopping or pausing the shared server (it is never touched)."""

from __future__ import annotations

import asyncio
import contextlib
from urllib.parse import urlsplit, urlunsplit


class PgProxy:
    """Forwards `host`:<port> (default 127.0.0.1) to the Postgres of `url`.

    `stall()` stops forwarding bytes both ways (connections stay open: what a SIGSTOPped
    server looks like to its clients); `resume()` lets them flow again. `refuse()` closes every
    open connection and every new one at once (a server that is down), `accept()` undoes it.
    """

    def __init__(self, url: str, host: str = "127.0.0.1") -> None:
        self.host = host
        parts = urlsplit(url)
        self._url = parts
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 5432)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._refusing = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        """`url` with the proxy as its host and port."""
        netloc = self._url.netloc.rsplit("@", 1)
        auth = netloc[0] + "@" if len(netloc) == 2 else ""
        return urlunsplit(self._url._replace(netloc=f"{auth}{self.host}:{self.port}"))

    async def start(self) -> PgProxy:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        self._flowing.set()
        if self._server is not None:
            self._server.close()
        self._cut()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def refuse(self) -> None:
        self._refusing = True
        self._cut()

    def accept(self) -> None:
        self._refusing = False

    def _cut(self) -> None:
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        pumps = [
            asyncio.create_task(self._pump(reader, up_writer)),
            asyncio.create_task(self._pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pumps:
                task.cancel()
                self._tasks.discard(task)
            for w in (writer, up_writer):
                w.transport.abort()
                self._writers.discard(w)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            await self._flowing.wait()
            writer.write(data)
            await writer.drain()
