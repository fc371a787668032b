"""Every connection Ripple opens to Postgres carries the socket options that make the kernel
drop it once its host stops answering (a black-holed primary: packets dropped, not refused),
read back from the sockets with getsockopt: pooled connections (through a multi-host URL too)
and a worker's dedicated claim connection, which are idle between statements and would
otherwise look open for hours."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import pytest

from ripple.platform.core.config import Settings, load_settings
from ripple.platform.core.db import Connection, DedicatedConnection, create_pool
from tests.pgproxy import PgProxy

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


# -- a real black hole -----------------------------------------------------------------------
# The client runs in a network namespace of the test's own, joined to this one by a veth pair;
# setting this end of the pair down drops every packet in silence (no reset, no ICMP), as a
# primary cut off by the network does. Needs root and `ip` (iproute2); skipped otherwise.

NETNS_LEASE = 2.0
REPO_ROOT = Path(__file__).resolve().parents[3]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


def _unavailable(reason: str) -> NoReturn:
    """Skip on a machine that cannot make the black hole (a laptop, an unprivileged
    container); fail where the suite was told it can (RIPPLE_REQUIRE_NETNS)."""
    if os.environ.get("RIPPLE_REQUIRE_NETNS"):
        pytest.fail(f"RIPPLE_REQUIRE_NETNS is set but {reason}")
    pytest.skip(reason)


@pytest.fixture
def netns() -> Iterator[tuple[str, str, str]]:
    """(namespace, this side's address, the veth on this side)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        # Creating a network namespace and a veth pair is a root operation: as another user
        # the socket options are still checked (the getsockopt tests), not their effect. CI
        # (RIPPLE_REQUIRE_NETNS=1, set by .ci/run) runs as root and must not skip.
        _unavailable("a real black hole needs root and iproute2 (`ip`) to make a network namespace")
    tag = f"{os.getpid() % 100_000}{secrets.randbelow(100)}"
    name, here, there = f"rbh{tag}", f"rbh{tag}a", f"rbh{tag}b"
    subnet = f"10.213.{secrets.randbelow(250)}"
    try:
        _ip("netns", "add", name)
    except subprocess.CalledProcessError as exc:
        # A container without CAP_SYS_ADMIN refuses namespaces even to root.
        _unavailable(f"the kernel refused a network namespace: {exc.stderr.decode().strip()}")
    try:
        _ip("link", "add", here, "type", "veth", "peer", "name", there, "netns", name)
        _ip("addr", "add", f"{subnet}.1/30", "dev", here)
        _ip("link", "set", here, "up")
        _ip("-n", name, "addr", "add", f"{subnet}.2/30", "dev", there)
        _ip("-n", name, "link", "set", there, "up")
        _ip("-n", name, "link", "set", "lo", "up")
        yield name, f"{subnet}.1", here
    finally:
        subprocess.run(["ip", "link", "del", here], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


async def test_dead_peer__a_black_holed_host_is_noticed_idle_or_busy(
    settings: Settings, netns: tuple[str, str, str]
) -> None:
    name, address, veth = netns
    assert settings.database_url is not None
    proxy = await PgProxy(settings.database_url, host=address).start()
    proc = await asyncio.create_subprocess_exec(
        "ip",
        "netns",
        "exec",
        name,
        sys.executable,
        "-m",
        "tests.integration.platform.dead_peer_main",
        proxy.url,
        str(NETNS_LEASE),
        cwd=REPO_ROOT,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    try:
        ready = await asyncio.wait_for(proc.stdout.readline(), 60)
        assert ready == b"ready\n", ready + await proc.stderr.read()  # type: ignore[union-attr]
        _ip("link", "set", veth, "down")  # every packet either way is dropped from now on
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        lines = [
            (await asyncio.wait_for(proc.stdout.readline(), 60)).decode().strip() for _ in range(3)
        ]
    finally:
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
        await proxy.close()
    # A statement sent into the hole fails (it would wait forever without the user timeout);
    # the idle connection is dropped; the one without the options has noticed nothing.
    assert lines[0].startswith("busy failed"), lines
    assert lines[1:] == ["idle closed", "plain open"], lines
