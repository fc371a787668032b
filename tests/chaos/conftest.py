"""Fixtures of the chaos battery: each test owns a throwaway Postgres cluster and a
`redis-server`, so it may crash, stop or freeze them, plus supervised worker processes running
`tests.e2e.resilience.app` against them.

Two profiles: the reduced one (default; each test well under 60 s) for a quick `pytest
tests/chaos`, the full one (`RIPPLE_CHAOS=full`, `make chaos`, run by CI) uses the durations and
sizes of the original battery. `make test` leaves this folder to `make chaos`.
Seeds are fixed. Each test prints a one-line figure summary (`pytest -s` shows them) and
records it (`tests/chaos/figures.py`); the session ends with all of them as one table.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

import asyncpg
import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import load_settings
from tests.chaos import figures
from tests.e2e.resilience.app import SCHEMA
from tests.e2e.resilience.conftest import Effects
from tests.e2e.resilience.procs import Workers, worker_processes
from tests.servers import PostgresCluster, RedisProcess

FULL = os.environ.get("RIPPLE_CHAOS") == "full"


@dataclass(frozen=True)
class Profile:
    """Sizes and durations of one battery run."""

    runs: int
    lease: float
    stall: float
    step: float
    outage: float


PROFILE = (
    Profile(runs=20, lease=3.0, stall=8.0, step=6.0, outage=10.0)
    if FULL
    else Profile(runs=10, lease=1.0, stall=2.5, step=1.5, outage=2.0)
)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One table of every chaos figure recorded in this process (none under xdist workers)."""
    if not figures.FIGURES:
        return
    profile = "full" if FULL else "reduced"
    terminalreporter.section(f"chaos battery figures ({profile} profile)")
    for line in figures.table():
        terminalreporter.write_line(line)


@pytest.fixture
def profile() -> Profile:
    return PROFILE


@pytest.fixture
def own_redis(redis_process: RedisProcess) -> RedisProcess:
    """The battery's name for `redis_process` (tests/conftest.py)."""
    return redis_process


def chaos_environment(database_url: str, **settings: str) -> dict[str, str]:
    """The RIPPLE_* environment of a chaos test's processes: its database, the battery's lease
    and pool sizes, a prefix of its own, and `settings` (RIPPLE_* names) over them."""
    return {
        "RIPPLE_DATABASE_URL": database_url,
        "RIPPLE_REDIS_PREFIX": f"chaos{uuid.uuid4().hex[:8]}:",
        "RIPPLE_LEASE_SECONDS": str(PROFILE.lease),
        "RIPPLE_POLL_INTERVAL": "0.2",
        "RIPPLE_SHUTDOWN_GRACE": "2",
        "RIPPLE_POOL_MIN_SIZE": "1",
        "RIPPLE_POOL_MAX_SIZE": "12",
        **settings,
    }


#: What the test's own client takes from its processes' environment (not the lease: it runs no
#: work of its own).
_CLIENT_SETTINGS = (
    "DATABASE_URL",
    "REDIS_URL",
    "REDIS_SENTINELS",
    "REDIS_SENTINEL_MASTER",
    "REDIS_PREFIX",
    "POLL_INTERVAL",
    "WEBHOOK_ALLOWED_NETWORKS",
)


@pytest.fixture
def chaos_env(cluster: PostgresCluster, own_redis: RedisProcess) -> dict[str, str]:
    return chaos_environment(cluster.url, RIPPLE_REDIS_URL=own_redis.url)


@pytest.fixture
async def chaos_client(chaos_env: dict[str, str]) -> AsyncIterator[Client]:
    chosen = {
        name.lower(): chaos_env[f"RIPPLE_{name}"]
        for name in _CLIENT_SETTINGS
        if f"RIPPLE_{name}" in chaos_env
    }
    settings = load_settings(**chosen, pool_min_size=1, pool_max_size=10)
    async with Client(settings=settings) as client:  # applies the migrations
        yield client


@pytest.fixture
async def chaos_effects(chaos_client: Client, chaos_env: dict[str, str]) -> AsyncIterator[Effects]:
    # The ledger lives in the test's database, or where a test that faults the database keeps
    # it (EFFECTS_DATABASE_URL), so the fault cannot touch it.
    url = chaos_env.get("EFFECTS_DATABASE_URL", chaos_env["RIPPLE_DATABASE_URL"])
    pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
    try:
        await pool.execute(SCHEMA)
        yield Effects(pool)
    finally:
        pool.terminate()


@pytest.fixture
async def chaos_workers(
    chaos_env: dict[str, str], chaos_effects: Effects
) -> AsyncIterator[Workers]:
    async with worker_processes(chaos_env) as started:
        yield started
