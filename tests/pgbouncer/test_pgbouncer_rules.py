"""What changes behind a transaction-mode pooler: migrations need the direct URL (their lock
is a session lock), and the worker's claim connection gets its session settings by
`SET LOCAL` inside each claim's transaction instead of as startup parameters."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.db import DedicatedConnection
from ripple.platform.errors import ConfigError
from tests.conftest import DatabaseDropper, _admin
from tests.helpers import with_database
from tests.pgbouncer.conftest import server_address, through
from tests.servers import PgBouncer


@pytest.fixture
async def blank_direct_url(pg_admin_url: str, drop_database: DatabaseDropper) -> AsyncIterator[str]:
    """An empty database (no migration applied), reached directly."""
    name = f"blank_{uuid.uuid4().hex[:12]}"
    await _admin(pg_admin_url, f'CREATE DATABASE "{name}"')
    try:
        yield with_database(pg_admin_url, name)
    finally:
        drop_database.drop(name)


async def test_pgbouncer__migrations_run_on_the_direct_url(
    settings: Settings, blank_direct_url: str, pgbouncer: PgBouncer
) -> None:
    pooled = settings.model_copy(
        update={"database_url": through(pgbouncer, blank_direct_url), "database_direct_url": None}
    )
    with pytest.raises(ConfigError, match="RIPPLE_DATABASE_DIRECT_URL"):
        await Client(settings=pooled).connect()

    direct = pooled.model_copy(update={"database_direct_url": blank_direct_url})
    async with Client(settings=direct) as client:
        assert await client.pool.fetchval("SELECT count(*) FROM ripple_migrations") > 10

    # Nothing pending now: a process with only the pooled URL connects (no lock needed).
    async with Client(settings=pooled) as client:
        await client.publish("after.migrations", {"ok": True})


async def test_pgbouncer__the_claimer_sets_its_settings_locally(settings: Settings) -> None:
    assert settings.database_pooler == "transaction"
    claimer = DedicatedConnection(
        settings,
        application_name="t",
        synchronous_commit="off",
        plan_cache_mode="force_generic_plan",
    )
    try:
        conn = await claimer.get()
        async with claimer.scoped(conn):
            assert await conn.fetchval("SHOW synchronous_commit") == "off"
            assert conn.is_in_transaction()
            # Statements behind the pooler are unnamed: no plan cache to steer, nothing sent.
            assert await conn.fetchval("SHOW plan_cache_mode") == "auto"
        assert await conn.fetchval("SHOW synchronous_commit") == "on"
    finally:
        await claimer.close()


async def test_pgbouncer__reaches_a_postgres_on_its_unix_socket(pg_admin_url: str) -> None:
    """The embedded Postgres (no server on the machine) listens on a Unix socket only: its
    URL names the socket directory (`?host=/dir`), and PgBouncer is pointed there."""
    conn = await asyncpg.connect(pg_admin_url)
    try:
        directory = str(await conn.fetchval("SHOW unix_socket_directories")).split(",")[0].strip()
        port = int(await conn.fetchval("SHOW port"))
    finally:
        await conn.close()
    socket_url = f"postgresql://postgres:@/postgres?host={directory}&port={port}"
    assert server_address(socket_url) == (directory, port)
    bouncer = PgBouncer(*server_address(socket_url))
    bouncer.start()
    try:
        pooled = await asyncpg.connect(bouncer.url("postgres"), statement_cache_size=0)
        try:
            # No client address on the server side: the connection came over the socket.
            assert await pooled.fetchval("SELECT inet_client_addr() IS NULL") is True
        finally:
            await pooled.close()
    finally:
        bouncer.stop()
