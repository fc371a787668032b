"""The pool's side of RIPPLE_DB_TIMEOUT: waiting for a free connection gives up too.

asyncpg's `command_timeout` bounds statements, not `pool.acquire`: with every connection
busy (stuck on a stalled server, or held), a call used to wait for as long as that lasted.
`asyncio.wait_for` bounds here are hang guards, not timing assertions.
"""

from __future__ import annotations

import asyncio

import pytest

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
