"""The HTTP layer of a real `ripple serve`, on raw sockets: request-head limits, keep-alive and
pipelining (ripple.platform.api.http_protocol).

uvicorn's own protocols fail these differently: h11 answers an over-long head with a plain-text
400, and its httptools protocol answers a target over 64 KiB with a plain-text 400 and reads any
head to its end.
"""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

from ripple.platform.api.limits import MAX_REQUEST_HEAD_BYTES, MAX_URI_BYTES
from tests.e2e.conftest import TOKEN, ApiServer

#: Bytes a test sends into a head that never ends before it gives up on the server cutting it.
_ENDLESS_HEAD_BOUND = 512 * 1024 * 1024


def _connect(server: ApiServer) -> socket.socket:
    where = urlsplit(server.url)
    assert where.hostname is not None
    assert where.port is not None
    return socket.create_connection((where.hostname, where.port), timeout=30)


def _read_to_eof(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


class _Reader:
    """Reads HTTP/1.1 responses (with Content-Length) off one connection, in order."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def response(self) -> tuple[int, dict[str, str], bytes]:
        while b"\r\n\r\n" not in self.buffer:
            self._more()
        head, _, self.buffer = self.buffer.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers["content-length"])
        while len(self.buffer) < length:
            self._more()
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        return int(status_line.split(" ")[1]), headers, body

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        assert chunk, f"connection closed mid-response; read {self.buffer[:300]!r}"
        self.buffer += chunk


def _problem(answer: bytes, status: int) -> dict[str, Any]:
    """The problem document of a whole raw answer with `status`, after checking its head."""
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode()), answer[:300]
    assert b"content-type: application/problem+json" in head.lower(), head
    document: dict[str, Any] = json.loads(body)
    assert document["status"] == status
    return document


def _publish(topic: str, n: int) -> bytes:
    body = json.dumps({"payload": {"n": n}}).encode()
    return (
        f"POST /v1/topics/{topic}/events HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def test_http__over_long_targets_get_the_414_problem_at_any_length(
    api_server: ApiServer,
) -> None:
    # Past 64 KiB (where uvicorn's httptools protocol gives up on the target), past the head
    # limit (the target alone is too long), and far past it. No `Connection: close`: reading
    # to the end shows the server closes the connection itself.
    for length in (MAX_URI_BYTES + 1, 100_000, MAX_REQUEST_HEAD_BYTES + 1, 3_000_000):
        # `length` bytes of path and query, as the API counts them (without the "?")
        target = "/v1/topics/a/events?q=" + "x" * (length - 21)
        with _connect(api_server) as sock:
            sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            answer = _read_to_eof(sock)
        problem = _problem(answer, 414)
        assert problem["type"] == "urn:ripple:problem:uri-too-long"
        assert problem["instance"] == "/v1/topics/a/events"
        assert f"longer than {MAX_URI_BYTES}" in problem["detail"]


def test_http__an_over_long_head_is_refused_with_431_and_the_connection_closed(
    api_server: ApiServer,
) -> None:
    one_big = f"X-Big: {'b' * MAX_REQUEST_HEAD_BYTES}\r\n"
    many = "X-Many: " + "m" * 100 + "\r\n"
    for headers in (one_big, many * (MAX_REQUEST_HEAD_BYTES // len(many) + 1)):
        with _connect(api_server) as sock:
            sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: x\r\n{headers}\r\n".encode())
            answer = _read_to_eof(sock)
        problem = _problem(answer, 431)
        assert problem["type"] == "urn:ripple:problem:request-head-too-large"
        assert problem["instance"] == "/healthz"
        assert b"connection: close" in answer.lower()
    # A head just under the limit is read and answered.
    under = "X-Big: " + "b" * (MAX_REQUEST_HEAD_BYTES - 200) + "\r\n"
    with _connect(api_server) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: x\r\n{under}\r\n".encode())
        status, _, _ = _Reader(sock).response()
    assert status == 200


def test_http__a_head_that_never_ends_is_cut_off(api_server: ApiServer) -> None:
    """The server stops reading a head that never ends: the client cannot make it buffer."""
    chunk = b"b" * 1024 * 1024
    sent = 0
    with _connect(api_server) as sock:
        try:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Endless: ")
            while sent < _ENDLESS_HEAD_BOUND:
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
    assert sent < _ENDLESS_HEAD_BOUND, "the server read a never-ending head for 512 MiB"


def test_http__keep_alive_and_pipelining_answer_in_order(api_server: ApiServer) -> None:
    with _connect(api_server) as sock:
        reader = _Reader(sock)
        # Two publishes in one write, then a third after their answers: one connection.
        sock.sendall(_publish("http.pipelined", 1) + _publish("http.pipelined", 2))
        first = reader.response()
        second = reader.response()
        sock.sendall(_publish("http.pipelined", 3))
        third = reader.response()
    assert [first[0], second[0], third[0]] == [202, 202, 202]
    ids = {json.loads(body)["eventId"] for _, _, body in (first, second, third)}
    assert len(ids) == 3


def test_http__a_refused_head_is_answered_after_the_requests_before_it(
    api_server: ApiServer,
) -> None:
    too_big = f"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {'b' * MAX_REQUEST_HEAD_BYTES}\r\n\r\n"
    with _connect(api_server) as sock:
        sock.sendall(_publish("http.pipelined", 4) + too_big.encode())
        reader = _Reader(sock)
        status, _, body = reader.response()
        assert status == 202, body
        rest = reader.buffer + _read_to_eof(sock)
    assert _problem(rest, 431)["instance"] == "/healthz"
