"""Crash recovery, fencing, attempt budgets and graceful shutdown (in one process: a "crash"
is simulated by expiring the lease in SQL, the way a dead worker's lease expires)."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from ripple.workflows import RetryPolicy, WorkflowContext, WorkflowFailed, store, workflow
from ripple.workflows.errors import LeaseLost
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runtime.writer import PgRunWriter, StepCommitter
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App

counts: dict[str, int] = {}
gate: dict[str, asyncio.Event] = {}


def bump(name: str) -> int:
    counts[name] = counts.get(name, 0) + 1
    return counts[name]


async def step_a() -> str:
    bump("a")
    return "a"


async def step_b() -> str:
    n = bump("b")
    if n == 1:
        gate["entered"].set()
        await gate["release"].wait()
        return "first"
    return "second"


@workflow(name="two-steps")
async def two_steps(ctx: WorkflowContext) -> list[str]:
    a = await ctx.step.run("a", step_a)
    b = await ctx.step.run("b", step_b)
    return [a, b]


def reset() -> None:
    counts.clear()
    gate.clear()
    gate["entered"] = asyncio.Event()
    gate["release"] = asyncio.Event()


async def expire_lease(app: App, run_id: str) -> None:
    await app.pool.execute(
        "UPDATE ripple_runs SET available_at = now() - interval '1 second' WHERE run_id = $1",
        run_id,
    )


async def test_recovery__expired_lease_is_reclaimed_and_stale_worker_is_fenced(app: App) -> None:
    reset()
    handle = await app.workflows.start(two_steps)
    stale = app.worker(two_steps)
    async with stale:
        await asyncio.wait_for(gate["entered"].wait(), 10)
        # step "a" was committed beside the slow step "b" (batched writes flushed)
        await assert_eventually(
            lambda: app.pool.fetchval(
                "SELECT count(*) FROM ripple_steps WHERE key = 'a' AND status = 'completed'"
            )
        )
        stale.stop()  # stop claiming; its step body stays blocked like a stalled process
        await expire_lease(app, handle.run_id)
        async with app.worker(two_steps):
            assert await handle.result(timeout=10) == ["a", "second"]
        gate["release"].set()  # the stale worker wakes up and tries to record "first"
    run = await app.workflows.get_run(handle.run_id)
    assert run is not None
    assert run.output == ["a", "second"]
    assert counts == {"a": 1, "b": 2}
    steps = {s.key: s for s in await app.workflows.list_steps(handle.run_id)}
    assert steps["b"].output == "second"
    # The stalled worker's attempt is a lost worker, not the step's error: not charged.
    assert steps["b"].attempts == 1
    # Nor is the crash budget: the run was not a suspect when its worker was lost. The claim
    # that recovered it made it one (it ran alone until it recorded a step).
    row = await app.pool.fetchrow(
        "SELECT recoveries, suspect FROM ripple_runs WHERE run_id = $1", handle.run_id
    )
    assert row is not None
    assert (row["recoveries"], row["suspect"]) == (0, True)


async def _lose_worker(
    app: App, run_id: str, *, recoveries: int, attempts: int, suspect: bool = True
) -> None:
    """The journal says: step "boom" started `attempts` times, none recorded, and the worker
    holding the run died (its lease lapsed) after `recoveries` earlier losses, with the run
    claimed alone there as a `suspect` (so this loss is charged to it) or not."""
    await app.pool.execute(
        "UPDATE ripple_runs SET status = 'running', started_at = now(), attempt = 1, "
        "lease_owner = 'dead', available_at = now() - interval '1 second', epoch = 3, "
        "recoveries = $2, suspect = $3 WHERE run_id = $1",
        run_id,
        recoveries,
        suspect,
    )
    await app.pool.execute(
        "INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts) "
        "VALUES ($1, 'boom', 0, 'run', 'running', $2)",
        run_id,
        attempts,
    )


@workflow(name="poison")
async def poison(ctx: WorkflowContext) -> str:
    def body() -> str:
        bump("boom")
        return "ok"

    return await ctx.step.run("boom", body, retry=RetryPolicy(max_attempts=3))


async def test_recovery__worker_losses_do_not_use_the_steps_attempts(app: App) -> None:
    reset()
    handle = await app.workflows.start(poison)
    # Its third attempt was running when the worker died: the step's budget is not spent.
    await _lose_worker(app, handle.run_id, recoveries=0, attempts=3)
    async with app.worker(poison):
        assert await handle.result(timeout=10) == "ok"
    assert counts == {"boom": 1}
    steps = await app.workflows.list_steps(handle.run_id)
    assert [(s.key, s.attempts) for s in steps] == [("boom", 3)]


async def test_recovery__run_that_keeps_killing_its_worker_exhausts_the_crash_budget(
    app: App,
) -> None:
    reset()
    app.settings = app.settings.model_copy(update={"max_recoveries": 3})
    handle = await app.workflows.start(poison)
    await _lose_worker(app, handle.run_id, recoveries=3, attempts=1)  # this claim is the 4th
    async with app.worker(poison):
        with pytest.raises(WorkflowFailed) as info:
            await handle.result(timeout=10)
    assert info.value.error["type"] == "WorkerLost"
    assert "'boom'" in info.value.error["message"]
    assert "RIPPLE_MAX_RECOVERIES" in info.value.error["message"]
    assert counts == {}


async def test_recovery__a_worker_lost_beside_other_runs_is_not_charged_to_the_run(
    app: App,
) -> None:
    """At the budget's edge, a loss while the run was not a suspect (it shared its worker,
    so any run there may have caused it) spends nothing: the run executes and completes."""
    reset()
    app.settings = app.settings.model_copy(update={"max_recoveries": 3})
    handle = await app.workflows.start(poison)
    await _lose_worker(app, handle.run_id, recoveries=3, attempts=1, suspect=False)
    async with app.worker(poison):
        assert await handle.result(timeout=10) == "ok"
    assert counts == {"boom": 1}
    recoveries = await app.pool.fetchval(
        "SELECT recoveries FROM ripple_runs WHERE run_id = $1", handle.run_id
    )
    assert recoveries == 3


async def test_recovery__within_the_crash_budget_a_recovered_run_completes(app: App) -> None:
    reset()
    app.settings = app.settings.model_copy(update={"max_recoveries": 3})
    handle = await app.workflows.start(poison)
    await _lose_worker(app, handle.run_id, recoveries=2, attempts=1)  # the 3rd: allowed
    async with app.worker(poison):
        assert await handle.result(timeout=10) == "ok"
    assert counts == {"boom": 1}


async def test_recovery__recovered_run_records_attempt_start_before_the_body(app: App) -> None:
    reset()
    handle = await app.workflows.start(two_steps)
    await app.pool.execute(
        "UPDATE ripple_runs SET status = 'running', started_at = now(), attempt = 1, "
        "lease_owner = 'dead', available_at = now() - interval '1 second' WHERE run_id = $1",
        handle.run_id,
    )
    async with app.worker(two_steps):
        await asyncio.wait_for(gate["entered"].wait(), 10)
        # careful mode: the attempt of "b" is durable while its body runs
        row = await app.pool.fetchrow(
            "SELECT status, attempts FROM ripple_steps WHERE run_id = $1 AND key = 'b'",
            handle.run_id,
        )
        assert row is not None
        assert (row["status"], row["attempts"]) == ("running", 1)
        gate["release"].set()
        assert await handle.result(timeout=10) == ["a", "first"]


async def test_recovery__graceful_stop_finishes_the_running_step_and_releases(app: App) -> None:
    reset()
    handle = await app.workflows.start(two_steps)
    counts["b"] = 1  # next call of step_b returns "second" at once
    first = app.worker(two_steps)

    async def slow_a() -> str:
        bump("a")
        gate["entered"].set()
        await gate["release"].wait()
        return "a"

    global step_a
    original, step_a = step_a, slow_a
    try:
        async with first:
            await asyncio.wait_for(gate["entered"].wait(), 10)
            first.stop()
            gate["release"].set()
        run = await app.workflows.get_run(handle.run_id)
        assert run is not None
        assert run.status == RunStatus.PENDING
        async with app.worker(two_steps):
            assert await handle.result(timeout=10) == ["a", "second"]
    finally:
        step_a = original
    assert counts["a"] == 1


async def test_recovery__stop_releases_runs_whose_step_outlasts_the_grace(app: App) -> None:
    reset()
    counts["a"] = 0
    app.settings = app.settings.model_copy(update={"shutdown_grace": 0.1})
    handle = await app.workflows.start(two_steps)
    async with app.worker(two_steps):
        await asyncio.wait_for(gate["entered"].wait(), 10)
    run = await app.workflows.get_run(handle.run_id)
    assert run is not None
    assert run.status == RunStatus.PENDING
    due = await app.pool.fetchval(
        "SELECT available_at <= now() FROM ripple_runs WHERE run_id = $1", handle.run_id
    )
    assert due is True


async def test_recovery__heartbeat_keeps_a_long_step_leased(app: App) -> None:
    counts.clear()
    app.settings = app.settings.model_copy(update={"lease_seconds": 0.3})

    @workflow(name="long")
    async def long(ctx: WorkflowContext) -> str:
        async def body() -> str:
            bump("long")
            await asyncio.sleep(1.0)
            return "done"

        return str(await ctx.step.run("long", body))

    handle = await app.workflows.start(long)
    async with app.worker(long), app.worker(long):
        assert await handle.result(timeout=10) == "done"
    assert counts["long"] == 1


async def test_fencing__a_claim_lost_in_a_database_crash_does_not_share_its_epoch(
    app: App,
) -> None:
    # Workers commit claims without waiting for the WAL flush. If Postgres crashes before the
    # flush, the claim is lost: the row is back as it was, while the worker that claimed still
    # holds the epoch. The next claim must get a different epoch, so that worker is fenced out.
    handle = await app.workflows.start(two_steps)
    before = await app.pool.fetchrow(
        "SELECT status, epoch, lease_owner, available_at, started_at, attempt "
        "FROM ripple_runs WHERE run_id = $1",
        handle.run_id,
    )
    pairs = [("two-steps", 1)]
    async with app.pool.acquire() as conn:
        (lost,) = await store.claim_runs(
            conn, worker_id="worker-a", lease=30.0, limit=1, pairs=pairs
        )
        # The crash: the claim never reached the disk.
        await conn.execute(
            "UPDATE ripple_runs SET status = $2, epoch = $3, lease_owner = $4, "
            "available_at = $5, started_at = $6, attempt = $7 WHERE run_id = $1",
            handle.run_id,
            *(before or {}).values(),
        )
        (again,) = await store.claim_runs(
            conn, worker_id="worker-b", lease=30.0, limit=1, pairs=pairs
        )
    assert again.epoch != lost.epoch
    stale = PgRunWriter(
        app.pool,
        app.waker,
        run_id=handle.run_id,
        epoch=lost.epoch,
        workflow="two-steps",
        lease=30.0,
        trace=None,
        may_have_waits=False,
        committer=StepCommitter(app.pool, lease=30.0),
    )
    with pytest.raises(LeaseLost):
        await stale.flush([], 0)


async def test_recovery__a_worker_does_not_claim_again_a_run_it_still_executes(
    app: App,
) -> None:
    """After a stall longer than the lease, a run whose execution is still going on in its
    worker is a suspect: that worker, not alone, does not claim it beside itself (which would
    run it twice in one process). Its execution goes on under its epoch and completes; only
    an idle worker could have taken the run over."""
    reset()
    handle = await app.workflows.start(two_steps)
    worker = app.worker(two_steps)
    with capture_logs() as logs:
        async with worker:
            await asyncio.wait_for(gate["entered"].wait(), 10)
            first = worker._inflight[handle.run_id]
            await expire_lease(app, handle.run_id)  # the stall: the lease lapsed meanwhile
            worker._kick()
            await assert_eventually(lambda: worker._suspect_waiting, timeout=10)
            assert worker._inflight[handle.run_id] is first
            gate["release"].set()
            assert await handle.result(timeout=10) == ["a", "first"]
            await assert_eventually(lambda: not worker._inflight, timeout=10)
    assert counts == {"a": 1, "b": 1}
    assert not [e for e in logs if e["event"] == "run_aborted"]
