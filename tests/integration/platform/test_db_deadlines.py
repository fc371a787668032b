"""RIPPLE_DB_TIMEOUT on a server that answers: waiting for a free connection gives up too,
and a call that gives up on a lock wait leaves nothing written.

asyncpg's `command_timeout` bounds statements, not `pool.acquire`: with every connection
busy (stuck on a stalled server, or held), a call used to wait for as long as that lasted.
The frozen server is in tests/chaos/test_frozen_deadlines.py. `asyncio.wait_for` bounds here
are hang guards, not timing assertions.
"""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool, create_pool, map_errors
from ripple.platform.errors import Unavailable

GUARD = 30.0


async def _select_one(pool: Pool) -> object:
    with map_errors():
        return await pool.fetchval("SELECT 1")


async def test_pool__waiting_for_a_free_connection_gives_up_after_the_db_timeout(
    settings: Settings,
) -> None:
    quick = settings.model_copy(update={"db_timeout": 0.3, "pool_min_size": 1, "pool_max_size": 1})
    pool = await create_pool(quick)
    try:
        async with pool.acquire():  # the one connection is busy
            with pytest.raises(Unavailable, match="RIPPLE_DB_TIMEOUT"):
                await asyncio.wait_for(_select_one(pool), GUARD)
        assert await _select_one(pool) == 1  # free again: served at once
    finally:
        await pool.close()


async def test_pool__a_worker_pool_waits_as_long_as_its_own_statement_bound(
    settings: Settings,
) -> None:
    """`command_timeout` (a worker's pool: the lease) also bounds its wait for a connection."""
    quick = settings.model_copy(update={"pool_min_size": 1, "pool_max_size": 1})
    pool = await create_pool(quick, command_timeout=0.3)
    try:
        async with pool.acquire():
            with pytest.raises(Unavailable):
                await asyncio.wait_for(_select_one(pool), GUARD)
    finally:
        await pool.close()


@pytest.mark.parametrize("table", ["ripple_queue_messages", "ripple_events", "ripple_signals"])
async def test_locked_table__the_caller_hears_that_nothing_was_written(
    settings: Settings, table: str
) -> None:
    """On a server that answers, a statement waiting on a lock past RIPPLE_DB_TIMEOUT is
    cancelled before its caller is answered: after the Unavailable, releasing the lock writes
    nothing (the deadline's grace lets the statement's own timeout answer first)."""
    quick = settings.model_copy(update={"db_timeout": 0.5})
    async with Client(settings=quick) as client:
        inbox = await client.start("locked-inbox", {})
        calls = {
            "ripple_queue_messages": lambda: client.queues.send("locked", {"n": 1}),
            "ripple_events": lambda: client.publish("locked.event", {"n": 1}),
            "ripple_signals": lambda: client.signal(inbox.run_id, "poke", {"n": 1}),
        }
        holder = await asyncpg.connect(settings.database_url)
        try:
            tx = holder.transaction()
            await tx.start()
            await holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(Unavailable, match="RIPPLE_DB_TIMEOUT"):
                await asyncio.wait_for(calls[table](), GUARD)
            await tx.rollback()
            # A write still queued on the lock is granted it first: this waits for it to commit.
            async with holder.transaction():
                await holder.execute(f"LOCK TABLE {table} IN SHARE MODE")
        finally:
            await holder.close()
        assert await client.pool.fetchval(f"SELECT count(*) FROM {table}") == 0
