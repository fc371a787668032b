"""The dashboard overview's run counts are exact at any volume: migration 0017's triggers
append a change row for every new, re-statused or deleted run, the sweeper folds them into the
per-minute rollup, and the overview reads the rollup plus the changes not folded yet."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from ripple.platform.client import Client
from ripple.platform.ops.sweeper import Sweeper
from ripple.platform.ui import store
from ripple.workflows.store.upkeep import RunUpkeep

#: More runs than the overview used to read (it counted only the newest 10,000).
RUNS = 12_000


async def _overview(client: Client) -> store.RecentRuns:
    now = datetime.now(UTC)
    return await store.recent_runs(
        client.pool, now - timedelta(days=1), timedelta(hours=1), buckets=30, now=now
    )


async def _changes(client: Client) -> int:
    return int(await client.pool.fetchval("SELECT count(*) FROM ripple_run_count_changes"))


async def test_run_counts__are_exact_beyond_any_cap_before_and_after_folding(
    client: Client,
) -> None:
    await client.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version) "
        "SELECT 'r-' || i, 'wf', 1 FROM generate_series(1, $1) AS i",
        RUNS,
    )
    await client.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, created_at) "
        "SELECT 'old-' || i, 'wf', 1, now() - interval '3 hours' FROM generate_series(1, 40) i"
    )
    await client.pool.execute(
        "UPDATE ripple_runs SET status = 'completed' WHERE run_id LIKE 'r-%' "
        "AND substr(run_id, 3)::int <= 2500"
    )
    await client.pool.execute(
        "UPDATE ripple_runs SET status = 'failed' WHERE run_id LIKE 'r-%' "
        "AND substr(run_id, 3)::int > $1 - 500",
        RUNS,
    )
    # a change that keeps the status (a lease renewal, say) appends nothing
    before = await _changes(client)
    await client.pool.execute("UPDATE ripple_runs SET attempt = attempt + 1 WHERE run_id = 'r-1'")
    assert await _changes(client) == before

    expected_day = {"wf": {"pending": RUNS - 3000 + 40, "completed": 2500, "failed": 500}}
    expected_hour = {"wf": {"pending": RUNS - 3000, "completed": 2500, "failed": 500}}
    unfolded = await _overview(client)
    assert unfolded.counts == expected_day
    assert unfolded.recent_counts == expected_hour
    assert sum(unfolded.created) == RUNS
    assert sum(unfolded.failed) == 500

    sweeper = Sweeper(client.pool, client.settings, runs=RunUpkeep())
    await sweeper.sweep_once()
    assert await _changes(client) == 0
    assert await _overview(client) == unfolded

    await client.pool.execute("DELETE FROM ripple_runs WHERE run_id LIKE 'old-%'")
    after_delete = await _overview(client)
    assert after_delete.counts == expected_hour
    await sweeper.sweep_once()
    assert await _overview(client) == after_delete


async def test_run_counts__runs_from_the_worker_are_counted_by_status(client: Client) -> None:
    handles = [await client.start("never-served", {"n": n}) for n in range(3)]
    assert await client.cancel(handles[0].run_id)
    overview = await _overview(client)
    assert overview.counts == {"never-served": {"pending": 2, "canceled": 1}}
    assert overview.recent_counts == overview.counts


async def test_run_counts__status_changes_of_one_minute_never_wait_on_each_other(
    client: Client,
) -> None:
    """Two transactions re-statusing runs of the same workflow and minute proceed at once:
    the count changes are appended, so no counter row is locked until a commit."""
    await client.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version) VALUES ('a', 'wf', 1), ('b', 'wf', 1)"
    )
    async with (
        client.pool.acquire() as first,
        client.pool.acquire() as second,
        first.transaction(),
    ):
        await first.execute("UPDATE ripple_runs SET status = 'running' WHERE run_id = 'a'")
        await second.execute("SET lock_timeout = '2s'")
        try:
            await second.execute("UPDATE ripple_runs SET status = 'running' WHERE run_id = 'b'")
        except asyncpg.LockNotAvailableError:
            pytest.fail("a status change waited on another transaction's count")
        finally:
            await second.execute("RESET lock_timeout")
    assert (await _overview(client)).counts == {"wf": {"running": 2}}
