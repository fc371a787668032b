"""Fixtures for the resilience tests: the effects table, worker processes, short leases."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from tests.e2e.resilience.app import SCHEMA
from tests.e2e.resilience.procs import Workers, worker_processes

#: Short lease and poll interval so takeovers happen within seconds.
LEASE_SECONDS = 2.0
POLL_INTERVAL = 0.2
SHUTDOWN_GRACE = 20.0


class Effects:
    """Test-side view of the `effects` table the step bodies write, and the gates they wait on."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def count(self, run_id: str, step: str, pid: int | None = None) -> int:
        """How many times a body recorded `step` for the run (from process `pid` if given)."""
        value = await self.pool.fetchval(
            "SELECT count(*) FROM effects WHERE run_id = $1 AND step = $2"
            " AND ($3::int IS NULL OR pid = $3)",
            run_id,
            step,
            pid,
        )
        return int(value)

    async def counts(self, run_id: str) -> dict[str, int]:
        """Effect counts of one run by step name."""
        rows = await self.pool.fetch(
            "SELECT step, count(*) AS n FROM effects WHERE run_id = $1 GROUP BY step", run_id
        )
        return {row["step"]: int(row["n"]) for row in rows}

    async def pids(self, run_id: str, step: str) -> list[int]:
        """The processes that recorded `step` for the run, in order."""
        rows = await self.pool.fetch(
            "SELECT pid FROM effects WHERE run_id = $1 AND step = $2 ORDER BY at", run_id, step
        )
        return [int(row["pid"]) for row in rows]

    async def open_gate(self, name: str) -> None:
        await self.pool.execute("INSERT INTO gates (name) VALUES ($1)", name)


@pytest.fixture
async def effects(database_url: str) -> AsyncIterator[Effects]:
    """Creates the effects/gates tables in this test's database."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2)
    try:
        await pool.execute(SCHEMA)
        yield Effects(pool)
    finally:
        await pool.close()


@pytest.fixture
def worker_env(database_url: str, redis_url: str, redis_prefix: str) -> dict[str, str]:
    """Environment of the worker processes: this test's database and Redis prefix."""
    return {
        "RIPPLE_DATABASE_URL": database_url,
        "RIPPLE_REDIS_URL": redis_url,
        "RIPPLE_REDIS_PREFIX": redis_prefix,
        "RIPPLE_LEASE_SECONDS": str(LEASE_SECONDS),
        "RIPPLE_POLL_INTERVAL": str(POLL_INTERVAL),
        "RIPPLE_SHUTDOWN_GRACE": str(SHUTDOWN_GRACE),
        "RIPPLE_POOL_MIN_SIZE": "1",
        "RIPPLE_POOL_MAX_SIZE": "10",
    }


@pytest.fixture
async def workers(worker_env: dict[str, str], effects: Effects) -> AsyncIterator[Workers]:
    """Starts worker processes; every one still alive is killed after the test."""
    async with worker_processes(worker_env) as started:
        yield started
