"""The in-memory journal/writer port (`MemoryRuns`): crashes replay from what was committed,
stale claims are fenced out, and the crash budget holds; no Postgres, no Redis."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest

from ripple.workflows import WorkflowContext, workflow
from ripple.workflows.errors import LeaseLost
from ripple.workflows.journal import Entry, StepStatus
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runtime.memory import MemoryRuns, MemoryRunWriter
from tests.helpers import assert_eventually

calls: Counter[str] = Counter()
gate: dict[str, asyncio.Event] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()
    gate["open"] = asyncio.Event()


def reserve(order: int) -> str:
    calls["reserve"] += 1
    return f"R-{order}"


async def charge(reservation: str) -> dict[str, object]:
    calls["charge"] += 1
    await gate["open"].wait()
    return {"paid": reservation}


@workflow(name="checkout")
async def checkout(ctx: WorkflowContext, order: int) -> dict[str, object]:
    reservation = await ctx.step.run("reserve", reserve, order)
    receipt = await ctx.step.run("charge", charge, reservation)
    return {"reservation": reservation, "receipt": receipt}


async def test_memory_runs__a_crash_replays_recorded_steps_without_running_them_again() -> None:
    runs = MemoryRuns([checkout])
    run_id = runs.start(checkout, 7)
    runs.begin(run_id)
    await assert_eventually(lambda: calls["charge"] == 1)
    # reserve's result was committed before charge's body began (the durability invariant)
    assert runs.run(run_id).journal["reserve"].status == StepStatus.COMPLETED
    await runs.crash(run_id)
    assert runs.run(run_id).status == RunStatus.RUNNING

    gate["open"].set()
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert (run.status, run.output) == (
        RunStatus.COMPLETED,
        {"reservation": "R-7", "receipt": {"paid": "R-7"}},
    )
    assert calls == {"reserve": 1, "charge": 2}  # only the step in flight ran again
    assert run.recoveries == 1
    assert run.journal["charge"].attempts == 1  # a lost worker is not the step's failure


async def test_memory_runs__a_stale_execution_is_fenced_out_by_a_newer_claim() -> None:
    runs = MemoryRuns([checkout])
    run_id = runs.start(checkout, 1)
    stale = runs.begin(run_id)
    await assert_eventually(lambda: calls["charge"] == 1)
    # Its lease expired: another worker claims the run and completes it.
    gate["open"].set()
    newer = await runs.execute(run_id)
    assert newer.status == RunStatus.COMPLETED
    with pytest.raises(LeaseLost):
        await stale
    run = runs.run(run_id)
    assert run.status == RunStatus.COMPLETED
    assert run.recoveries == 1


async def test_memory_writer__writes_need_the_claims_epoch() -> None:
    runs = MemoryRuns([checkout])
    run_id = runs.start(checkout, 1)
    first = MemoryRunWriter(runs, run_id, runs.claim(run_id).epoch)
    second = MemoryRunWriter(runs, run_id, runs.claim(run_id).epoch)
    done = Entry("reserve", 0, "run", StepStatus.COMPLETED, 1, "R-1")
    with pytest.raises(LeaseLost):
        await first.flush([done], 1)
    assert runs.run(run_id).journal == {}
    await second.flush([done], 1)
    # a recorded result is never changed again
    await second.flush([Entry("reserve", 0, "run", StepStatus.COMPLETED, 1, "other")], 1)
    assert runs.run(run_id).journal["reserve"].output == "R-1"
    await second.finish([], 1, RunStatus.COMPLETED, "out", None)
    with pytest.raises(LeaseLost):  # a finished run is owned by no one
        await second.flush([], 1)


async def test_memory_runs__a_run_that_keeps_losing_its_worker_fails_past_the_crash_budget() -> (
    None
):
    runs = MemoryRuns([checkout], max_recoveries=1)
    run_id = runs.start(checkout, 3)
    for crashes in (1, 2):
        runs.begin(run_id)
        await assert_eventually(charged(crashes))
        await runs.crash(run_id)
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == "WorkerLost"
    assert "'charge'" in run.error["message"]  # after a recovery, each attempt is committed
    assert calls["charge"] == 2


def charged(times: int) -> Callable[[], bool]:
    return lambda: calls["charge"] == times


@workflow(name="approval")
async def approval(ctx: WorkflowContext) -> object:
    await ctx.step.sleep("cool-off", 3600)
    return await ctx.step.wait_for_event("approved", match={"ok": True})


async def test_memory_runs__timers_move_simulated_time_and_signals_resume_waits() -> None:
    runs = MemoryRuns([approval])
    run_id = runs.start(approval)
    start = runs.now
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert run.status == RunStatus.WAITING
    assert runs.now - start >= timedelta(hours=1)  # moved, not slept
    assert runs.signal(run_id, "approved", {"ok": False}) is False  # no match: kept in inbox
    assert runs.signal(run_id, "approved", {"ok": True, "by": "ann"}) is True
    await runs.run_until_idle()
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"ok": True, "by": "ann"})
