"""The API process's listening socket (ripple.platform.processes.server), exercised on loopback."""

from __future__ import annotations

import asyncio
import socket

import pytest

from ripple.platform.ops.runner import run_process
from ripple.platform.processes.server import _listen


async def test_listen__accepted_connections_have_nagle_off() -> None:
    # A response written in two parts (head, then body) must not wait for the client's
    # delayed ACK: every connection the event loop accepts has TCP_NODELAY set.
    sock = _listen("127.0.0.1", 0)
    nodelay: asyncio.Queue[int] = asyncio.Queue()

    class Probe(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            conn = transport.get_extra_info("socket")
            nodelay.put_nowait(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            transport.close()

    loop = asyncio.get_running_loop()
    server = await loop.create_server(Probe, sock=sock)
    try:
        host, port = sock.getsockname()[:2]
        _, writer = await asyncio.open_connection(host, port)
        assert await asyncio.wait_for(nodelay.get(), 10) != 0
        writer.close()
        await writer.wait_closed()
    finally:
        server.close()
        await server.wait_closed()


def test_run_process__runs_on_uvloop_where_installed() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def loop_type() -> type[asyncio.AbstractEventLoop]:
        return type(asyncio.get_running_loop())

    assert issubclass(run_process(loop_type()), uvloop.Loop)
