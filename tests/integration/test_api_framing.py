"""HTTP framing stays valid after a bug: a request whose route raises an unexpected exception
gets its 500 problem, and the keep-alive connection it came on still answers the next request
(or, where it cannot, the 500 says `Connection: close`).

The server is `ripple serve`'s own uvicorn server (`_api_server`: the bounded httptools protocol,
the app from `create_app`) with one extra route that raises, spoken to over a raw socket so the
test sees exactly what the client's connection sees.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from fastapi import FastAPI

from ripple.platform.client import Client
from ripple.platform.processes.server import _api_server, _listen
from tests.helpers import assert_eventually

FAULT_PATH = "/v1/test-fault"


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


@pytest.fixture
async def server_address(client: Client) -> AsyncIterator[tuple[str, int]]:
    sock = _listen("127.0.0.1", 0)
    server = _api_server(client, sock)

    async def fault() -> None:
        raise RuntimeError("a bug in a route")

    app = server.config.app
    assert isinstance(app, FastAPI)
    app.add_api_route(FAULT_PATH, fault, methods=["GET"])
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await assert_eventually(lambda: server.started)
        host, port = sock.getsockname()[:2]
        yield host, port
    finally:
        server.should_exit = True
        await task
        sock.close()


def _request(target: str) -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: test\r\n\r\n".encode()


async def _read_answer(reader: asyncio.StreamReader) -> Answer:
    """One response (Content-Length framed, as every Ripple answer is) from the connection."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 10)
    return Answer(int(status_line.split()[1]), headers, body)


async def _next_answer_or_close(reader: asyncio.StreamReader, first: Answer) -> Answer | None:
    """The next answer, or None if the server closed the connection as the first one said."""
    try:
        return await _read_answer(reader)
    except (asyncio.IncompleteReadError, ConnectionResetError):
        assert first.headers.get("connection") == "close", (
            f"the connection closed after a {first.status} without `Connection: close`"
        )
        return None


async def test_api_framing__a_500_leaves_the_keep_alive_connection_usable(
    server_address: tuple[str, int],
) -> None:
    reader, writer = await asyncio.open_connection(*server_address)
    try:
        writer.write(_request(FAULT_PATH))
        first = await _read_answer(reader)
        assert first.status == 500
        assert first.headers["content-type"] == "application/problem+json"
        assert b"a bug in a route" not in first.body  # the detail stays in the server log
        writer.write(_request("/healthz"))
        second = await _next_answer_or_close(reader, first)
        if second is not None:
            assert second.status == 200, second
    finally:
        writer.close()


async def test_api_framing__pipelined_requests_after_a_500_are_answered_in_order(
    server_address: tuple[str, int],
) -> None:
    reader, writer = await asyncio.open_connection(*server_address)
    try:
        writer.write(_request("/healthz") + _request(FAULT_PATH) + _request("/healthz"))
        answers = [await _read_answer(reader), await _read_answer(reader)]
        assert [a.status for a in answers] == [200, 500]
        third = await _next_answer_or_close(reader, answers[1])
        if third is not None:
            assert third.status == 200, third
    finally:
        writer.close()
