"""The migration runner against a blank database: order, idempotence, checksums, concurrency."""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace

import asyncpg
import pytest

from ripple.platform.core.config import load_settings
from ripple.platform.core.db import Pool, create_pool
from ripple.platform.core.migrate import (
    Migration,
    apply_migrations,
    load_migrations,
    pending_migrations,
)
from ripple.platform.errors import ConfigError
from tests.conftest import DatabaseDropper, _admin
from tests.helpers import with_database


@pytest.fixture
async def blank_url(pg_admin_url: str, drop_database: DatabaseDropper) -> AsyncIterator[str]:
    name = f"blank_{uuid.uuid4().hex[:12]}"
    await _admin(pg_admin_url, f'CREATE DATABASE "{name}"')
    try:
        yield with_database(pg_admin_url, name)
    finally:
        drop_database.drop(name)


@pytest.fixture
async def blank_pool(blank_url: str) -> AsyncIterator[Pool]:
    pool = await create_pool(load_settings(), dsn=blank_url)
    try:
        yield pool
    finally:
        await pool.close()


async def test_migrate__applies_all_once(blank_pool: Pool) -> None:
    shipped = load_migrations()
    assert await pending_migrations(blank_pool) == len(shipped)
    assert await apply_migrations(blank_pool) == len(shipped)
    assert await apply_migrations(blank_pool) == 0
    assert await pending_migrations(blank_pool) == 0
    rows = await blank_pool.fetch("SELECT version FROM ripple_migrations ORDER BY version")
    assert [r["version"] for r in rows] == [m.version for m in shipped]


async def test_migrate__edited_migration_is_refused(blank_pool: Pool) -> None:
    migrations = [Migration(1, "one", "CREATE TABLE one (id int)")]
    await apply_migrations(blank_pool, migrations)
    edited = [replace(migrations[0], sql="CREATE TABLE one (id bigint)")]
    with pytest.raises(ConfigError, match="edited after it was applied"):
        await apply_migrations(blank_pool, edited)


async def test_migrate__unknown_applied_version_is_refused(blank_pool: Pool) -> None:
    await apply_migrations(
        blank_pool, [Migration(1, "a", "SELECT 1"), Migration(2, "b", "SELECT 2")]
    )
    with pytest.raises(ConfigError, match="does not ship"):
        await apply_migrations(blank_pool, [Migration(1, "a", "SELECT 1")])


async def test_migrate__failed_migration_leaves_nothing(blank_pool: Pool) -> None:
    bad = [
        Migration(1, "ok", "CREATE TABLE ok (id int)"),
        Migration(2, "bad", "CREATE TABLE half (id int); SELECT no_such_function()"),
    ]
    with pytest.raises(Exception, match="no_such_function"):
        await apply_migrations(blank_pool, bad)
    assert await blank_pool.fetchval("SELECT to_regclass('half')") is None
    assert await blank_pool.fetchval("SELECT max(version) FROM ripple_migrations") == 1


async def test_migrate__no_transaction_migration(blank_pool: Pool) -> None:
    migrations = [
        Migration(1, "t", "CREATE TABLE t (id int)"),
        Migration(2, "idx", "-- ripple: no-transaction\nCREATE INDEX CONCURRENTLY t_id ON t (id)"),
    ]
    assert await apply_migrations(blank_pool, migrations) == 2
    assert await blank_pool.fetchval("SELECT to_regclass('t_id')") is not None


async def test_migrate__ten_processes_at_once(blank_url: str) -> None:
    script = (
        "import asyncio, sys\n"
        "from ripple.platform.core.config import load_settings\n"
        "from ripple.platform.core.db import create_pool\n"
        "from ripple.platform.core.migrate import apply_migrations\n"
        "async def main():\n"
        "    pool = await create_pool(load_settings(), dsn=sys.argv[1])\n"
        "    print(await apply_migrations(pool))\n"
        "    await pool.close()\n"
        "asyncio.run(main())\n"
    )
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            script,
            blank_url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(10)
    ]
    results = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 60)
    assert all(p.returncode == 0 for p in procs), [err.decode() for _, err in results]
    applied = [int(out.decode().strip().splitlines()[-1]) for out, _ in results]
    assert sum(applied) == len(load_migrations())  # each migration applied by exactly one process
    conn = await asyncpg.connect(blank_url)
    try:
        count = await conn.fetchval("SELECT count(*) FROM ripple_migrations")
    finally:
        await conn.close()
    assert count == len(load_migrations())
