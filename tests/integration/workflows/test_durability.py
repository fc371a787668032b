"""The durability invariant: a step body, child start, wait, timer or suspension begins only
after every step result the run completed earlier is committed; and the worker's group commit
that makes it cheap (many runs per statement, each fenced by its own epoch)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ripple.platform.errors import InvalidInput
from ripple.workflows import WorkflowContext, workflow
from ripple.workflows.errors import LeaseLost
from ripple.workflows.journal import Entry
from ripple.workflows.runtime.writer import StepCommitter
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App

gates: dict[str, asyncio.Event] = {}


def _gate(name: str) -> asyncio.Event:
    return gates.setdefault(name, asyncio.Event())


async def _committed(app: App, run_id: str) -> dict[str, str]:
    rows = await app.pool.fetch("SELECT key, status FROM ripple_steps WHERE run_id = $1", run_id)
    return {row["key"]: row["status"] for row in rows}


async def _hold(name: str) -> str:
    _gate(f"{name}.entered").set()
    await _gate(f"{name}.release").wait()
    return name


@workflow(name="chain")
async def chain(ctx: WorkflowContext) -> list[str]:
    customer = await ctx.step.run("create-customer", lambda: "cus_1")
    stamp = str(ctx.uuid())
    charge = await ctx.step.run("charge", _hold, "charge")
    return [customer, charge, stamp[:0]]


async def test_durability__previous_step_is_committed_before_the_next_body_starts(
    app: App,
) -> None:
    gates.clear()
    handle = await app.workflows.start(chain)
    async with app.worker(chain):
        await asyncio.wait_for(_gate("charge.entered").wait(), 10)
        # While "charge" runs, "create-customer" (and the journaled uuid) are durable.
        committed = await _committed(app, handle.run_id)
        assert committed["create-customer"] == "completed"
        assert committed["$uuid"] == "completed"
        _gate("charge.release").set()
        assert await handle.result(timeout=10) == ["cus_1", "charge", ""]


@workflow(name="fan")
async def fan(ctx: WorkflowContext) -> list[str]:
    first = await asyncio.gather(ctx.step.run("x", lambda: "x"), ctx.step.run("y", lambda: "y"))
    last = await ctx.step.run("z", _hold, "z")
    return [*first, last]


async def test_durability__steps_started_together_commit_before_the_one_after(app: App) -> None:
    gates.clear()
    handle = await app.workflows.start(fan)
    async with app.worker(fan):
        await asyncio.wait_for(_gate("z.entered").wait(), 10)
        committed = await _committed(app, handle.run_id)
        assert (committed["x"], committed["y"]) == ("completed", "completed")
        _gate("z.release").set()
        assert await handle.result(timeout=10) == ["x", "y", "z"]


@workflow(name="timer-beside-body")
async def timer_beside_body(ctx: WorkflowContext) -> list[Any]:
    async def then_sleep() -> str:
        done = await ctx.step.run("quick", lambda: "quick")
        await ctx.step.sleep("pause", 30)
        return str(done)

    # The sleep starts while "long" runs, so the run does not suspend: "quick" must still be
    # committed before the timer begins, not when "long" ends.
    return list(await asyncio.gather(ctx.step.run("long", _hold, "long"), then_sleep()))


async def test_durability__a_timer_beside_a_running_body_commits_what_finished(
    app: App,
) -> None:
    gates.clear()
    handle = await app.workflows.start(timer_beside_body)
    async with app.worker(timer_beside_body):
        await asyncio.wait_for(_gate("long.entered").wait(), 10)

        async def quick_committed() -> bool:
            return (await _committed(app, handle.run_id)).get("quick") == "completed"

        await assert_eventually(quick_committed, timeout=10)
        _gate("long.release").set()
        await assert_eventually(lambda: _status_is(app, handle.run_id, "sleeping"), timeout=10)


async def _status_is(app: App, run_id: str, status: str) -> bool:
    run = await app.workflows.get_run(run_id)
    return run is not None and run.status == status


@workflow(name="three")
async def three(ctx: WorkflowContext, n: int) -> int:
    a = await ctx.step.run("a", lambda: n)
    b = await ctx.step.run("b", lambda: a + 1)
    return int(await ctx.step.run("c", lambda: b + 1))


async def test_group_commit__flushes_of_concurrent_runs_share_statements(app: App) -> None:
    handles = await asyncio.gather(*(app.workflows.start(three, i) for i in range(200)))
    worker = app.worker(three, concurrency=100)
    async with worker:
        results = await asyncio.gather(*(h.result(timeout=60) for h in handles))
    assert results == [i + 2 for i in range(200)]
    # Two flushes per run ("a" before "b", "b" before "c"); the last commits with completion.
    # (More only if a run's lease needed confirming on a very slow machine.)
    assert worker.committer.flushed >= 400
    assert worker.committer.batches < worker.committer.flushed


async def _claimed(app: App, n: int) -> list[tuple[str, int]]:
    """`n` runs of `three` claimed by a pretend worker: (run id, epoch) each."""
    ids = [(await app.workflows.start(three, i)).run_id for i in range(n)]
    rows = await app.pool.fetch(
        "UPDATE ripple_runs SET status = 'running', epoch = 7, lease_owner = 'me', "
        "started_at = now() WHERE run_id = ANY($1::text[]) RETURNING run_id, epoch",
        ids,
    )
    return sorted((row["run_id"], row["epoch"]) for row in rows)


def _done(key: str, output: Any) -> Entry:
    return Entry(key, 0, "run", "completed", 1, output)


async def test_group_commit__a_fenced_out_run_fails_alone(app: App) -> None:
    (mine, epoch), (lost, _) = await _claimed(app, 2)
    await app.pool.execute("UPDATE ripple_runs SET epoch = epoch + 1 WHERE run_id = $1", lost)
    committer = StepCommitter(app.pool, lease=5.0)
    results = await asyncio.gather(
        committer.flush(mine, epoch, 1, [_done("a", 1)]),
        committer.flush(lost, epoch, 1, [_done("a", 2)]),
        return_exceptions=True,
    )
    assert results[0] is None
    assert isinstance(results[1], LeaseLost)
    assert committer.batches == 1
    assert await _committed(app, mine) == {"a": "completed"}
    assert await _committed(app, lost) == {}


async def test_group_commit__an_entry_postgres_refuses_fails_only_its_run(app: App) -> None:
    (good, epoch), (bad, _) = await _claimed(app, 2)
    committer = StepCommitter(app.pool, lease=5.0)
    results = await asyncio.gather(
        committer.flush(good, epoch, 1, [_done("a", "fine")]),
        committer.flush(bad, epoch, 1, [_done("a", "nul \x00 byte")]),  # jsonb refuses \u0000
        return_exceptions=True,
    )
    assert results[0] is None
    assert isinstance(results[1], InvalidInput)
    assert await _committed(app, good) == {"a": "completed"}
    assert await _committed(app, bad) == {}


async def test_group_commit__a_canceled_waiter_does_not_cancel_the_batch(app: App) -> None:
    (one, epoch), (two, _) = await _claimed(app, 2)
    committer = StepCommitter(app.pool, lease=5.0)
    first = asyncio.ensure_future(committer.flush(one, epoch, 1, [_done("a", 1)]))
    second = asyncio.ensure_future(committer.flush(two, epoch, 1, [_done("a", 2)]))
    await asyncio.sleep(0)
    first.cancel()
    await second
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await _committed(app, two) == {"a": "completed"}
    await assert_eventually(lambda: _committed(app, one), timeout=5)


async def test_group_commit__completions_share_a_batch_with_flushes_and_stay_fenced(
    app: App,
) -> None:
    (flushed, epoch), (done, _), (failed, _), (lost, _) = await _claimed(app, 4)
    await app.pool.execute("UPDATE ripple_runs SET epoch = epoch + 1 WHERE run_id = $1", lost)
    committer = StepCommitter(app.pool, lease=5.0)
    results = await asyncio.gather(
        committer.flush(flushed, epoch, 1, [_done("a", 1)]),
        committer.finish(done, epoch, 3, [_done("c", 3)], "completed", {"ok": [1, 2]}, None),
        committer.finish(failed, epoch, 2, [], "failed", None, {"type": "Boom", "message": "x"}),
        committer.finish(lost, epoch, 3, [_done("c", 3)], "completed", None, None),
        return_exceptions=True,
    )
    assert results[0] is None
    completed, failed_row = results[1], results[2]
    assert not isinstance(completed, BaseException), completed
    assert not isinstance(failed_row, BaseException), failed_row
    assert completed.created_at is not None
    assert completed.completed_at is not None
    assert completed.completed_at >= completed.created_at
    assert failed_row.completed_at is not None
    assert isinstance(results[3], LeaseLost)
    assert committer.batches == 1
    rows = {
        row["run_id"]: row
        for row in await app.pool.fetch(
            "SELECT run_id, status, output, error, lease_owner, step_count, completed_at "
            "FROM ripple_runs WHERE run_id = ANY($1::text[])",
            [flushed, done, failed, lost],
        )
    }
    assert (rows[flushed]["status"], rows[flushed]["lease_owner"]) == ("running", "me")
    assert rows[flushed]["completed_at"] is None
    assert (rows[done]["status"], rows[done]["output"]) == ("completed", {"ok": [1, 2]})
    assert (rows[done]["lease_owner"], rows[done]["step_count"]) == (None, 3)
    assert rows[failed]["status"] == "failed"
    assert rows[failed]["error"] == {"type": "Boom", "message": "x"}
    assert rows[lost]["status"] == "running"
    assert await _committed(app, done) == {"c": "completed"}
    assert await _committed(app, lost) == {}


async def test_group_commit__a_lone_finish_writes_its_run_and_stays_fenced(app: App) -> None:
    # One finishing run per batch (an idle worker's usual case): the run's row, its journal
    # and its times as a shared batch writes them; a fenced-out one raises LeaseLost.
    (done, epoch), (lost, _) = await _claimed(app, 2)
    await app.pool.execute("UPDATE ripple_runs SET epoch = epoch + 1 WHERE run_id = $1", lost)
    committer = StepCommitter(app.pool, lease=5.0)
    times = await committer.finish(done, epoch, 3, [_done("c", 3)], "completed", {"ok": 1}, None)
    with pytest.raises(LeaseLost):
        await committer.finish(lost, epoch, 3, [_done("c", 3)], "completed", None, None)
    assert committer.batches == 2
    assert times.created_at is not None
    assert times.completed_at is not None
    assert times.completed_at >= times.created_at
    row = await app.pool.fetchrow(
        "SELECT status, output, lease_owner, step_count, completed_at, available_at <= now() "
        "AS available FROM ripple_runs WHERE run_id = $1",
        done,
    )
    assert row is not None
    assert tuple(row) == ("completed", {"ok": 1}, None, 3, times.completed_at, True)
    assert await _committed(app, done) == {"c": "completed"}
    assert await app.pool.fetchval("SELECT status FROM ripple_runs WHERE run_id = $1", lost) == (
        "running"
    )
    assert await _committed(app, lost) == {}


async def test_group_commit__a_flush_locks_the_run_row_without_rewriting_it(app: App) -> None:
    (run_id, epoch), (renewed, _) = await _claimed(app, 2)
    query = "SELECT ctid::text AS ctid, available_at, step_count FROM ripple_runs WHERE run_id = $1"
    before = await app.pool.fetchrow(query, run_id)
    before_renewed = await app.pool.fetchrow(query, renewed)
    committer = StepCommitter(app.pool, lease=60.0)
    await asyncio.gather(
        committer.flush(run_id, epoch, 2, [_done("a", 1)]),
        committer.flush(renewed, epoch, 2, [_done("a", 1)], renew=True),
    )
    after = await app.pool.fetchrow(query, run_id)
    # The journal entry is committed; the run row is the same row version (no index churn).
    assert await _committed(app, run_id) == {"a": "completed"}
    assert after is not None
    assert before is not None
    assert dict(after) == dict(before)
    # A renewing flush extends the lease and stores the step count.
    after_renewed = await app.pool.fetchrow(query, renewed)
    assert after_renewed is not None
    assert before_renewed is not None
    assert after_renewed["available_at"] > before_renewed["available_at"]
    assert after_renewed["step_count"] == 2


@workflow(name="keyed-start")
async def keyed_start(ctx: WorkflowContext, n: int) -> int:
    return n


async def test_group_commit__concurrent_starts_of_the_same_keys_from_two_clients(
    settings: Any,
) -> None:
    """Starts are group-committed per process; two processes' batches that share idempotency
    keys (in opposite orders) still give one run per key, the same to both callers."""
    from tests.integration.workflows.conftest import close_app, make_app

    one, two = await make_app(settings), await make_app(settings)
    try:
        keys = [f"order-{i}" for i in range(40)]
        for _ in range(5):
            suffix = str(_)
            first, second = await asyncio.gather(
                asyncio.gather(
                    *(
                        one.workflows.start(keyed_start, i, idempotency_key=k + suffix)
                        for i, k in enumerate(keys)
                    )
                ),
                asyncio.gather(
                    *(
                        two.workflows.start(keyed_start, i, idempotency_key=k + suffix)
                        for i, k in reversed(list(enumerate(keys)))
                    )
                ),
            )
            assert [h.run_id for h in first] == [h.run_id for h in reversed(second)]
        count = await one.pool.fetchval(
            "SELECT count(DISTINCT idempotency_key) = count(*) FROM ripple_runs"
        )
        assert count is True
        assert await one.pool.fetchval("SELECT count(*) FROM ripple_runs") == 5 * len(keys)
    finally:
        await close_app(one)
        await close_app(two)
