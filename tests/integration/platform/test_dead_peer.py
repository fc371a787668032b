"""Every connection Ripple opens to Postgres carries the socket options that make the kernel
drop it once its host stops answering (a black-holed primary: packets dropped, not refused),
read back from the sockets with getsockopt: pooled connections (through a multi-host URL too)
and a worker's dedicated claim connection, which are idle between statements and would
otherwise look open for hours."""

from __future__ import annotations

import socket
import sys
from typing import Any
from urllib.parse import urlsplit

import pytest

from ripple.platform.core.config import Settings, load_settings
from ripple.platform.core.db import Connection, DedicatedConnection, create_pool

LEASE = 30.0
#: What `dead_peer_options(30)` means: probes after 15 s idle, every 5 s, 3 of them; sent data
#: or probes unacknowledged for 30 s end the connection.
EXPECTED = {
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE): 1,
    (socket.IPPROTO_TCP, socket.TCP_KEEPIDLE): 15,
    (socket.IPPROTO_TCP, socket.TCP_KEEPINTVL): 5,
    (socket.IPPROTO_TCP, socket.TCP_KEEPCNT): 3,
}
if sys.platform == "linux":
    EXPECTED[(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)] = 30_000


def _options(conn: Connection) -> dict[tuple[int, int], int]:
    raw: Any = getattr(conn, "_con", conn)  # a pool hands out a proxy of the connection
    sock = raw._transport.get_extra_info("socket")
    assert sock is not None
    assert sock.family == socket.AF_INET
    return {(level, option): sock.getsockopt(level, option) for level, option in EXPECTED}


def _leased(settings: Settings, url: str | None = None) -> Settings:
    return load_settings(
        database_url=url or settings.database_url,
        lease_seconds=LEASE,
        pool_min_size=1,
        pool_max_size=2,
    )


@pytest.mark.parametrize("multi_host", [False, True], ids=["one-host", "multi-host"])
async def test_dead_peer__pooled_connections_carry_keepalive_and_user_timeout(
    settings: Settings, multi_host: bool
) -> None:
    assert settings.database_url is not None
    url = settings.database_url
    if multi_host:
        # A second host that refuses (nothing listens on port 1): the pool lands on the first.
        parts = urlsplit(url)
        url = f"postgresql://{parts.username}@{parts.hostname}:{parts.port},127.0.0.1:1{parts.path}"
    pool = await create_pool(_leased(settings, url))
    try:
        async with pool.acquire() as conn:
            assert _options(conn) == EXPECTED
        await pool.expire_connections()  # a reconnected connection gets them as well
        async with pool.acquire() as conn:
            assert _options(conn) == EXPECTED
    finally:
        await pool.close()


async def test_dead_peer__a_workers_claim_connection_carries_them(settings: Settings) -> None:
    dedicated = DedicatedConnection(_leased(settings))
    try:
        assert _options(await dedicated.get()) == EXPECTED
    finally:
        await dedicated.close()


async def test_dead_peer__the_options_follow_the_lease(settings: Settings) -> None:
    short = load_settings(
        database_url=settings.database_url, lease_seconds=1.0, pool_min_size=1, pool_max_size=1
    )
    pool = await create_pool(short)
    try:
        async with pool.acquire() as conn:
            got = _options(conn)
    finally:
        await pool.close()
    # Whole seconds are the kernel's unit for the probes; never below one.
    assert got[(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)] == 1
    assert got[(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL)] == 1
    if sys.platform == "linux":
        assert got[(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)] == 1000
