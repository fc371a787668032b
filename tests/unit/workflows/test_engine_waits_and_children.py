"""Waits, child runs, deadlines, limits and journaled values at unit speed, on the in-memory
port (`MemoryRuns`); each mirrors a behaviour the integration suite specifies against Postgres."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from ripple.workflows import (
    StepTimeoutError,
    WorkflowContext,
    WorkflowFailed,
    workflow,
)
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runtime.memory import MemoryRuns

calls: Counter[str] = Counter()


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()


# -- waits ---------------------------------------------------------------------------------------


@workflow(name="approval")
async def approval(ctx: WorkflowContext) -> Any:
    return await ctx.step.wait_for_event(
        "approved", match={"order": {"id": 7}, "tags": ["vip"]}, timeout=timedelta(days=2)
    )


async def test_wait__resumes_only_on_a_payload_that_contains_the_match() -> None:
    runs = MemoryRuns([approval])
    run_id = runs.start(approval)
    await runs.execute(run_id)
    assert runs.run(run_id).status == RunStatus.WAITING
    assert not runs.signal(run_id, "approved", {"order": {"id": 8}, "tags": ["vip"]})
    assert not runs.signal(run_id, "approved", {"order": {"id": 7}, "tags": ["new"]})
    assert not runs.signal(run_id, "other", {"order": {"id": 7}, "tags": ["vip"]})
    match = {"order": {"id": 7, "total": 5}, "tags": ["new", "vip"]}
    assert runs.signal(run_id, "approved", match)
    await runs.run_until_idle()
    assert runs.run(run_id).output == match


async def test_wait__a_signal_sent_before_the_wait_is_consumed_from_the_inbox() -> None:
    runs = MemoryRuns([approval])
    run_id = runs.start(approval)
    assert not runs.signal(run_id, "approved", {"order": {"id": 7}, "tags": ["vip"]})
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"order": {"id": 7}, "tags": ["vip"]})
    assert run.inbox == []


async def test_wait__times_out_with_none() -> None:
    runs = MemoryRuns([approval])
    run_id = runs.start(approval)
    start = runs.now
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, None)
    assert runs.now - start >= timedelta(days=2)
    assert run.waits == {}


# -- child runs ----------------------------------------------------------------------------------


@workflow(name="child")
async def child(ctx: WorkflowContext, n: int) -> int:
    if n < 0:
        raise ValueError("negative")
    if n == 0:
        await ctx.step.sleep("forever", timedelta(days=1))
    return int(await ctx.step.run("double", lambda: n * 2))


@workflow(name="parent")
async def parent(ctx: WorkflowContext, n: int) -> dict[str, Any]:
    try:
        out = await ctx.step.run_workflow(child, n, timeout=60 if n == 0 else None)
    except StepTimeoutError:
        return {"timeout": True}
    except WorkflowFailed as exc:
        return {"failed": exc.error["type"], "child": exc.run_id}
    return {"out": out}


def children(runs: MemoryRuns, run_id: str) -> list[str]:
    return [r.run_id for r in runs.runs.values() if r.parent_run_id == run_id]


async def test_child__output_returns_to_the_parent() -> None:
    runs = MemoryRuns([parent, child])
    run_id = runs.start(parent, 21)
    await runs.run_until_idle()
    assert runs.run(run_id).output == {"out": 42}
    [kid] = children(runs, run_id)
    assert runs.run(kid).status == RunStatus.COMPLETED


async def test_child__failure_raises_workflow_failed_in_the_parent() -> None:
    runs = MemoryRuns([parent, child])
    run_id = runs.start(parent, -1)
    await runs.run_until_idle()
    [kid] = children(runs, run_id)
    assert runs.run(run_id).output == {"failed": "ValueError", "child": kid}


async def test_child__timeout_fails_the_step_not_the_child() -> None:
    runs = MemoryRuns([parent, child])
    run_id = runs.start(parent, 0)
    await runs.run_until_idle()
    assert runs.run(run_id).output == {"timeout": True}
    [kid] = children(runs, run_id)
    kid_run = runs.run(kid)
    # not canceled with the step: it ran on to its own end, a day later
    assert (kid_run.status, kid_run.output) == (RunStatus.COMPLETED, 0)


async def test_child__canceling_a_child_fails_its_parents_step() -> None:
    runs = MemoryRuns([parent, child])
    run_id = runs.start(parent, 0)
    await runs.execute(run_id)
    [kid] = children(runs, run_id)
    assert runs.cancel(kid)
    await runs.run_until_idle()
    assert runs.run(run_id).output == {"failed": "WorkflowCanceled", "child": kid}


async def test_child__a_crash_after_starting_it_does_not_start_a_second_child() -> None:
    runs = MemoryRuns([parent, child])
    run_id = runs.start(parent, 21)
    await runs.execute(run_id)  # started the child, then waited for it
    run = runs.run(run_id)
    del run.journal["child"]  # as if the step's entry were lost with the execution
    run.status = RunStatus.RUNNING
    await runs.run_until_idle()
    assert run.output == {"out": 42}
    assert len(children(runs, run_id)) == 1


# -- deadline, step limit, journaled values --------------------------------------------------------


@workflow(name="napper")
async def napper(ctx: WorkflowContext) -> None:
    await ctx.step.sleep("nap", timedelta(hours=2))


async def test_deadline__fails_a_sleeping_run_when_reached() -> None:
    runs = MemoryRuns([napper])
    run_id = runs.start(napper, deadline=runs.now + timedelta(hours=1))
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == "DeadlineExceeded"
    assert runs.now == run.deadline  # woken at the deadline, not at the end of the nap


@workflow(name="runaway")
async def runaway(ctx: WorkflowContext) -> None:
    for i in range(100):
        await ctx.step.run("step", lambda i=i: calls.update([f"step-{i}"]))


async def test_step_limit__fails_a_runaway_run() -> None:
    runs = MemoryRuns([runaway], max_steps=10)
    run_id = runs.start(runaway)
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == "StepLimitExceeded"
    assert len(calls) == 10


@workflow(name="values")
async def values(ctx: WorkflowContext) -> list[str]:
    first = [ctx.now().isoformat(), str(ctx.uuid()), str(ctx.random())]
    await ctx.step.sleep("later", timedelta(hours=1))
    return [*first, ctx.now().isoformat()]


async def test_deterministic_helpers__replay_the_recorded_values() -> None:
    runs = MemoryRuns([values])
    run_id = runs.start(values)
    await runs.run_until_idle()
    run = runs.run(run_id)
    recorded = [str(run.journal[k].output) for k in ("$now", "$uuid", "$random")]
    assert run.output[:3] == recorded
    # the second now() is a new call, recorded after the sleep on the simulated clock
    assert run.output[3] == run.journal["$now:1"].output
    assert run.output[3] > run.output[0]
