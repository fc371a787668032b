"""A multi-host database URL (`postgresql://u@h1,h2/db?target_session_attrs=read-write`):
every connection lands on the writable host, even when another host answers nothing at all
(a dead primary whose packets are dropped) or is a standby."""

from __future__ import annotations

import time
from urllib.parse import urlsplit

from ripple.platform.client import Client
from ripple.platform.core.config import Settings, load_settings
from ripple.platform.core.db import _connect_each, _hosts, create_pool
from tests.pgproxy import PgProxy
from tests.servers import PostgresCluster


def _multi(first_port: int, url: str) -> str:
    parts = urlsplit(url)
    netloc = f"{parts.username}@127.0.0.1:{first_port},{parts.hostname}:{parts.port}"
    return f"postgresql://{netloc}{parts.path}?target_session_attrs=read-write"


def test_multi_host__urls_split_per_host() -> None:
    assert _hosts("postgresql://u:p@a:1,b:2/db?x=1") == [
        "postgresql://u:p@a:1/db?x=1",
        "postgresql://u:p@b:2/db?x=1",
    ]
    assert _hosts("postgresql://a,b/db") == ["postgresql://a/db", "postgresql://b/db"]
    assert _hosts("postgresql://u@a:1/db") == ["postgresql://u@a:1/db"]


async def test_multi_host__a_black_holed_host_is_passed_over(
    settings: Settings, proxy: PgProxy
) -> None:
    assert settings.database_url is not None
    proxy.stall()  # accepts the TCP connection, then never answers
    url = _multi(proxy.port, settings.database_url)
    timeout = 4.0
    pool = await create_pool(
        load_settings(database_url=url, db_timeout=timeout, pool_min_size=1, pool_max_size=2)
    )
    try:
        port = urlsplit(settings.database_url).port
        assert await pool.fetchval("SELECT inet_server_port()") == port
        # The host that answered is tried first from then on: no time lost on the dead one.
        await pool.expire_connections()
        started = time.monotonic()
        assert await pool.fetchval("SELECT inet_server_port()") == port
        assert time.monotonic() - started < timeout / 2
    finally:
        await pool.close()


async def test_multi_host__the_last_good_host_going_dark_costs_a_stagger_not_the_timeout(
    settings: Settings, proxy: PgProxy
) -> None:
    # After a failover the host that answered last is the dead primary, tried first.
    assert settings.database_url is not None
    url = _multi(proxy.port, settings.database_url)
    first = await _connect_each(url, timeout=20.0)
    assert await first.fetchval("SELECT 1") == 1  # through the proxy: now the last good host
    await first.close()
    proxy.stall()
    timeout = 20.0
    started = time.monotonic()
    conn = await _connect_each(url, timeout=timeout)
    try:
        elapsed = time.monotonic() - started
        assert (
            await conn.fetchval("SELECT inet_server_port()") == urlsplit(settings.database_url).port
        )
        # Trying the hosts one at a time gave the dead one its share: half the timeout.
        assert elapsed < timeout / 4, elapsed
    finally:
        await conn.close()
    # The answering host is first now.
    again = await _connect_each(url, timeout=timeout)
    await again.close()


async def test_multi_host__the_client_skips_a_standby(cluster: PostgresCluster) -> None:
    standby = PostgresCluster(replica_of=cluster)
    standby.start()
    try:
        url = _multi(standby.port, cluster.url)
        async with Client(settings=load_settings(database_url=url, pool_min_size=1)) as client:
            # Migrations ran, and writes go to the primary.
            assert await client.pool.fetchval("SELECT NOT pg_is_in_recovery()") is True
            result = await client.publish("multi.host", {"ok": True})
            assert result.event_id
    finally:
        standby.remove()
