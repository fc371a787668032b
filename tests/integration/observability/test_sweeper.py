"""Retention sweeper against real Postgres: time moves by rewriting timestamps in SQL."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import asyncpg
import pytest
from prometheus_client import REGISTRY

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool
from ripple.platform.errors import ConfigError
from ripple.platform.ops.sweeper import Sweeper
from ripple.workflows.store import RunUpkeep
from tests.helpers import assert_eventually

UPKEEP = RunUpkeep()

DAY = 86_400.0
ACTIVE = ("pending", "running", "sleeping", "waiting")


async def expire(conn: Any, *, batch: int, journal_budget: int) -> tuple[dict[str, int], bool]:
    """One retention batch of the workflow store (90 days at most, 30 by default)."""
    return await UPKEEP.delete_expired_runs(
        conn,
        max_retention=90 * DAY,
        default_retention=30 * DAY,
        batch=batch,
        journal_budget=journal_budget,
    )


async def make_run(
    pool: Pool,
    *,
    status: str,
    age_days: float,
    retention_days: float | None = 30.0,
    hold: bool = False,
    steps: int = 2,
) -> str:
    """A run whose timestamps lie `age_days` in the past, with a journal, a wait and a signal."""
    run_id = f"run-{uuid.uuid4().hex}"
    terminal = status not in ACTIVE
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            """
            INSERT INTO ripple_runs (run_id, workflow, version, status, retention_seconds,
                                     hold, created_at, started_at, completed_at, updated_at)
            VALUES ($1, 'wf', 1, $2, $3, $4,
                    now() - make_interval(secs => $5), now() - make_interval(secs => $5),
                    CASE WHEN $6 THEN now() - make_interval(secs => $5) END,
                    now() - make_interval(secs => $5))
            """,
            run_id,
            status,
            None if retention_days is None else retention_days * DAY,
            hold,
            age_days * DAY,
            terminal,
        )
        for seq in range(steps):
            await conn.execute(
                "INSERT INTO ripple_steps (run_id, key, seq, kind, status) "
                "VALUES ($1, $2, $3, 'run', 'completed')",
                run_id,
                f"step-{seq}",
                seq,
            )
        await conn.execute(
            "INSERT INTO ripple_waits (run_id, step_key, step_seq, name) VALUES ($1, 'w', 9, 'w')",
            run_id,
        )
        await conn.execute(
            "INSERT INTO ripple_signals (run_id, name, payload) VALUES ($1, 'late', $2)",
            run_id,
            {"x": 1},
        )
    return run_id


async def count(pool: Pool, table: str, run_id: str) -> int:
    value = await pool.fetchval(f"SELECT count(*) FROM {table} WHERE run_id = $1", run_id)
    return int(value)


async def exists(pool: Pool, run_id: str) -> bool:
    return await count(pool, "ripple_runs", run_id) == 1


def deleted_total(kind: str) -> float:
    value = REGISTRY.get_sample_value("sweeper_deleted_total", {"kind": kind})
    return value or 0.0


async def test_sweeper__deletes_expired_terminal_runs_with_their_journal(
    pool: Pool, settings: Settings
) -> None:
    expired = [
        await make_run(pool, status="completed", age_days=31),
        await make_run(pool, status="failed", age_days=2, retention_days=1),
        await make_run(pool, status="canceled", age_days=40, retention_days=35),
    ]
    kept = [
        await make_run(pool, status="completed", age_days=10),
        await make_run(pool, status="failed", age_days=0.5, retention_days=1),
    ]
    sweeper = Sweeper(pool, settings, runs=UPKEEP)

    result = await sweeper.sweep_once()

    assert result["runs"] == 3
    assert result["steps"] == 6
    assert result["waits"] == 3
    assert result["signals"] == 3
    for run_id in expired:
        assert not await exists(pool, run_id)
        for table in ("ripple_steps", "ripple_waits", "ripple_signals"):
            assert await count(pool, table, run_id) == 0
    for run_id in kept:
        assert await exists(pool, run_id)
        assert await count(pool, "ripple_steps", run_id) == 2
    assert (await sweeper.sweep_once())["runs"] == 0


async def test_sweeper__active_and_held_runs_survive(pool: Pool, settings: Settings) -> None:
    active = [await make_run(pool, status=status, age_days=400) for status in ACTIVE]
    held = await make_run(pool, status="completed", age_days=400, hold=True)
    released = await make_run(pool, status="failed", age_days=400)
    sweeper = Sweeper(pool, settings, runs=UPKEEP)
    assert await sweeper.hold(released) is True
    assert await sweeper.hold("run-that-does-not-exist") is False

    result = await sweeper.sweep_once()

    assert result["runs"] == 0
    for run_id in [*active, held, released]:
        assert await exists(pool, run_id)
        assert await count(pool, "ripple_steps", run_id) == 2
        assert await count(pool, "ripple_signals", run_id) == 1

    assert await sweeper.hold(released, hold=False) is True
    assert (await sweeper.sweep_once())["runs"] == 1
    assert not await exists(pool, released)
    assert await exists(pool, held)


async def test_sweeper__default_and_server_maximum_bound_each_runs_retention(
    pool: Pool, settings: Settings
) -> None:
    clamped = settings.model_copy(
        update={"max_run_retention_days": 60.0, "default_run_retention_days": 20.0}
    )
    too_long = await make_run(pool, status="completed", age_days=61, retention_days=365)
    long_kept = await make_run(pool, status="completed", age_days=59, retention_days=365)
    unset = await make_run(pool, status="completed", age_days=21, retention_days=None)
    young_unset = await make_run(pool, status="completed", age_days=19, retention_days=None)

    result = await Sweeper(pool, clamped, runs=UPKEEP).sweep_once()

    assert result["runs"] == 2
    assert not await exists(pool, too_long)
    assert not await exists(pool, unset)
    assert await exists(pool, long_kept)
    assert await exists(pool, young_unset)

    too_big_default = clamped.model_copy(update={"default_run_retention_days": 365.0})
    old_unset = await make_run(pool, status="completed", age_days=61, retention_days=None)
    assert (await Sweeper(pool, too_big_default, runs=UPKEEP).sweep_once())["runs"] == 1
    assert not await exists(pool, old_unset)
    assert await exists(pool, young_unset)


async def test_sweeper__batches_are_bounded_and_drained(pool: Pool, settings: Settings) -> None:
    for _ in range(7):
        await make_run(pool, status="completed", age_days=31, steps=1)
    async with pool.acquire() as conn, conn.transaction():
        one_batch = await expire(conn, batch=3, journal_budget=1000)
    assert one_batch == ({"runs": 3, "steps": 3, "waits": 3, "signals": 3}, True)

    small = settings.model_copy(update={"sweep_batch_size": 3})
    result = await Sweeper(pool, small, runs=UPKEEP).sweep_once()

    assert result["runs"] == 4
    assert await pool.fetchval("SELECT count(*) FROM ripple_runs") == 0


async def test_sweeper__a_batch_of_long_runs_is_cut_by_the_journal_budget(pool: Pool) -> None:
    long_runs = [await make_run(pool, status="completed", age_days=31, steps=4) for _ in range(3)]
    await pool.execute("UPDATE ripple_runs SET step_count = 4")

    async with pool.acquire() as conn, conn.transaction():
        counts, more = await expire(conn, batch=10, journal_budget=9)
    assert (counts["runs"], counts["steps"], more) == (2, 8, True)  # 4 + 4 fit in 9, 12 not
    async with pool.acquire() as conn, conn.transaction():
        counts, more = await expire(conn, batch=10, journal_budget=1)
    assert (counts["runs"], counts["steps"], more) == (1, 4, False)  # at least one run
    assert not [r for r in long_runs if await exists(pool, r)]


async def test_sweeper__skips_rows_locked_by_others(
    pool: Pool, settings: Settings, database_url: str
) -> None:
    busy = await make_run(pool, status="completed", age_days=31)
    free = await make_run(pool, status="completed", age_days=31)
    other = await asyncpg.connect(database_url)
    try:
        tx = other.transaction()
        await tx.start()
        await other.execute("SELECT 1 FROM ripple_runs WHERE run_id = $1 FOR UPDATE", busy)

        result = await asyncio.wait_for(Sweeper(pool, settings, runs=UPKEEP).sweep_once(), 10)

        assert result["runs"] == 1
        assert not await exists(pool, free)
        assert await exists(pool, busy)
        await tx.rollback()
    finally:
        await other.close()
    assert (await Sweeper(pool, settings, runs=UPKEEP).sweep_once())["runs"] == 1


async def test_sweeper__without_run_retention_leaves_the_workflow_tables_to_their_owner(
    pool: Pool, settings: Settings
) -> None:
    expired_run = await make_run(pool, status="completed", age_days=400)
    sweeper = Sweeper(pool, settings)  # no RunRetention port wired

    result = await sweeper.sweep_once()

    assert result["runs"] == result["signal_keys"] == 0
    assert await exists(pool, expired_run)
    with pytest.raises(ConfigError, match="runs="):
        await sweeper.hold(expired_run)
    assert (await Sweeper(pool, settings, runs=UPKEEP).sweep_once())["runs"] == 1


async def test_sweeper__counts_deleted_rows_in_metrics(pool: Pool, settings: Settings) -> None:
    await make_run(pool, status="completed", age_days=31, steps=3)
    before = {kind: deleted_total(kind) for kind in ("runs", "steps", "waits", "signals")}

    await Sweeper(pool, settings, runs=UPKEEP).sweep_once()

    after = {kind: deleted_total(kind) for kind in before}
    assert {k: after[k] - before[k] for k in before} == {
        "runs": 1,
        "steps": 3,
        "waits": 1,
        "signals": 1,
    }


async def test_sweeper__background_loop_sweeps_until_stopped(
    pool: Pool, settings: Settings
) -> None:
    sweeper = Sweeper(pool, settings.model_copy(update={"sweep_interval": 0.05}), runs=UPKEEP)
    task = asyncio.create_task(sweeper.run())
    try:
        run_id = await make_run(pool, status="completed", age_days=31)

        async def gone() -> bool:
            return not await exists(pool, run_id)

        await assert_eventually(gone)
    finally:
        sweeper.stop()
        await asyncio.wait_for(task, 5)


async def test_sweeper__stop_before_run_is_not_lost(pool: Pool, settings: Settings) -> None:
    sweeper = Sweeper(pool, settings.model_copy(update={"sweep_interval": 3600}), runs=UPKEEP)
    sweeper.stop()
    await asyncio.wait_for(sweeper.run(), 5)


async def test_sweeper__worker_runs_it_unless_switched_off(settings: Settings) -> None:
    from ripple.platform.client import Client
    from ripple.workflows import Worker

    fast = settings.model_copy(update={"sweep_interval": 0.05})
    async with Client(settings=fast) as client:
        # the scheduler always runs (schedules); the others only when asked for
        off = client.background_services(webhooks=False, sweeper=False)
        assert [s.name for s in off] == ["scheduler"]
        service = client.background_services(webhooks=False, sweeper=True)[0]
        assert service.name == "sweeper"
        run_id = await make_run(client.pool, status="completed", age_days=31)
        assert await client.hold(run_id) is True
        expired = await make_run(client.pool, status="failed", age_days=31)

        async with Worker(client, [], webhooks=False, sweeper=True):

            async def swept() -> bool:
                return not await exists(client.pool, expired)

            await assert_eventually(swept)
        assert await exists(client.pool, run_id)  # held


async def test_sweeper__runs_started_by_fan_out_snapshot_the_workflows_retention(
    settings: Settings,
) -> None:
    from datetime import timedelta

    from ripple.platform.client import Client
    from ripple.subscribers import WorkflowTarget
    from ripple.workflows import WorkflowContext, workflow

    @workflow(name="short-lived", retention=timedelta(days=2))
    async def short_lived(ctx: WorkflowContext, inp: dict[str, int]) -> None:
        return None

    @workflow(name="long-lived", retention=timedelta(days=365))
    async def long_lived(ctx: WorkflowContext, inp: dict[str, int]) -> None:
        return None

    async with Client(settings=settings) as client:
        client.workflows.register(short_lived, long_lived)
        await client.subscribe("retention.*", WorkflowTarget(short_lived))
        await client.subscribe("retention.*", WorkflowTarget(long_lived))
        await client.subscribe("retention.*", WorkflowTarget("unknown-here"))
        await client.publish("retention.test", {"n": 1})
        rows = await client.pool.fetch("SELECT workflow, retention_seconds FROM ripple_runs")

    assert {r["workflow"]: r["retention_seconds"] for r in rows} == {
        "short-lived": 2 * DAY,
        "long-lived": settings.max_run_retention_days * DAY,
        "unknown-here": None,  # the sweeper applies the default retention
    }
