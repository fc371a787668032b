"""Many runs across several workers in one process: each step body runs exactly once."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter

from ripple.platform.core.db import DedicatedConnection
from ripple.workflows import WorkflowContext, workflow
from tests.integration.workflows.conftest import App

executions: Counter[str] = Counter()


@workflow(name="tally")
async def tally(ctx: WorkflowContext, n: int) -> int:
    async def record(step: str) -> int:
        executions[f"{ctx.run_id}:{step}"] += 1
        await asyncio.sleep(0)
        return n

    a = await ctx.step.run("a", record, "a")
    await ctx.step.sleep("tiny", 0.001)
    b = await ctx.step.run("b", record, "b")
    return int(a) + int(b)


async def test_many_runs__several_workers_never_execute_a_step_twice(app: App) -> None:
    executions.clear()
    handles = await asyncio.gather(*(app.workflows.start(tally, i) for i in range(300)))
    workers = [app.worker(tally, concurrency=25) for _ in range(4)]
    for worker in workers:
        await worker.__aenter__()
    try:
        results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
    finally:
        for worker in workers:
            await worker.__aexit__(None, None, None)
    assert results == [2 * i for i in range(300)]
    assert len(executions) == 600
    assert set(executions.values()) == {1}


@workflow(name="quick")
async def quick(ctx: WorkflowContext, n: int) -> int:
    return int(await ctx.step.run("double", lambda: n * 2))


async def test_run_until_idle__executes_due_runs_and_returns(app: App) -> None:
    handles = [await app.workflows.start(quick, i) for i in range(10)]
    await app.worker(quick).run_until_idle()
    runs = [await app.workflows.get_run(h.run_id) for h in handles]
    assert [r.output for r in runs if r is not None] == [2 * i for i in range(10)]
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_workers") == 0


async def test_worker__stopping_right_away_returns(app: App) -> None:
    async with app.worker(quick):
        pass
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_workers") == 0


async def test_worker__opens_its_connections_before_claiming(app: App) -> None:
    # Opening a connection stalls the worker's event loop for 10-20 ms; the worker pays that
    # before its first claim instead of in the middle of a burst of runs.
    handle = await app.workflows.start(quick, 1)
    async with app.worker(quick, concurrency=5) as worker:
        await handle.result(timeout=10)
        # the worker's own pool (its writes are bounded by the lease, not RIPPLE_DB_TIMEOUT)
        assert worker.pool is not app.pool
        assert worker.pool.get_size() >= min(5 + 2, worker.pool.get_max_size())


async def test_worker__never_freezes_the_gc_and_claims_without_waiting_for_the_flush(
    app: App,
) -> None:
    # gc.freeze() is the process entry point's call (ProcessRunner(freeze=True) in the CLI),
    # never library code's: an application embedding a Worker keeps its collector as it was.
    # The claim connection commits asynchronously (see docs/workflows.md).
    gc.unfreeze()
    threshold = gc.get_threshold()
    first = await app.workflows.start(quick, 1)
    await app.worker(quick, concurrency=5).run_until_idle()
    assert await first.result(timeout=10) == 2
    handle = await app.workflows.start(quick, 2)
    worker = app.worker(quick, concurrency=5)
    async with worker:
        await handle.result(timeout=10)
        assert await app.pool.fetchval("SHOW synchronous_commit") == "on"
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == threshold  # nor tunes it
    # The claim loop owns its connection while it runs (a probe on it raced a claim, and the
    # worker then dropped the connection): open one with the worker's settings instead.
    probe = DedicatedConnection(app.settings, **worker._claimer._server_settings)
    try:
        conn = await probe.get()
        assert await conn.fetchval("SHOW synchronous_commit") == "off"
        assert await conn.fetchval("SHOW plan_cache_mode") == "force_generic_plan"
    finally:
        await probe.close()
