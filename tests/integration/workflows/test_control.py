"""Cancel, compensation, deadlines, step limits, workflow retry, non-determinism, versions,
deterministic helpers and listing."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from ripple.platform.errors import InvalidInput
from ripple.workflows import (
    RetryPolicy,
    RollbackError,
    RunHandle,
    WorkflowCanceled,
    WorkflowContext,
    WorkflowFailed,
    workflow,
)
from ripple.workflows.runs.records import RunStatus
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App

log: list[str] = []
events: dict[str, asyncio.Event] = {}


async def run_status(app: App, run_id: str) -> RunStatus | None:
    run = await app.workflows.get_run(run_id)
    return None if run is None else run.status


@workflow(name="blocker")
async def blocker(ctx: WorkflowContext) -> None:
    async def hang() -> None:
        events["entered"].set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            log.append("step-cancelled")
            raise

    await ctx.step.run("hang", hang)
    await ctx.step.run("never", lambda: log.append("never"))


async def test_cancel__cancels_the_running_step_and_marks_canceled_at_once(app: App) -> None:
    log.clear()
    events["entered"] = asyncio.Event()
    handle = await app.workflows.start(blocker)
    async with app.worker(blocker):
        await asyncio.wait_for(events["entered"].wait(), 10)
        assert await app.workflows.cancel(handle.run_id) is True
        assert await run_status(app, handle.run_id) == RunStatus.CANCELED
        await assert_eventually(lambda: "step-cancelled" in log)
        with pytest.raises(WorkflowCanceled):
            await handle.result(timeout=5)
    assert "never" not in log
    assert await app.workflows.cancel(handle.run_id) is False


def reserve(item: str) -> str:
    log.append(f"reserve {item}")
    return item


def release(item: str) -> None:
    log.append(f"release {item}")


def charge() -> None:
    raise RollbackError("card declined")


@workflow(name="saga")
async def saga(ctx: WorkflowContext) -> None:
    await ctx.step.run("hotel", reserve, "hotel", compensate=release)
    await ctx.step.run("car", reserve, "car", compensate=release)
    await ctx.step.run("charge", charge)


async def test_compensation__runs_in_reverse_order_as_durable_steps(app: App) -> None:
    log.clear()
    handle = await app.workflows.start(saga)
    async with app.worker(saga):
        with pytest.raises(WorkflowFailed) as info:
            await handle.result(timeout=10)
    assert info.value.error["type"] == "RollbackError"
    assert log == ["reserve hotel", "reserve car", "release car", "release hotel"]
    steps = [(s.key, s.kind, s.status) for s in await app.workflows.list_steps(handle.run_id)]
    assert steps == [
        ("hotel", "run", "completed"),
        ("car", "run", "completed"),
        ("charge", "run", "failed"),
        ("compensate:car", "compensate", "completed"),
        ("compensate:hotel", "compensate", "completed"),
    ]


@workflow(name="slowpoke")
async def slowpoke(ctx: WorkflowContext) -> None:
    await ctx.step.sleep("long", 3600)


async def test_deadline__fails_a_sleeping_run_when_reached(app: App) -> None:
    handle = await app.workflows.start(slowpoke, deadline=timedelta(milliseconds=300))
    async with app.worker(slowpoke):
        with pytest.raises(WorkflowFailed) as info:
            await handle.result(timeout=10)
    assert info.value.error["type"] == "DeadlineExceeded"


@workflow(name="runaway")
async def runaway(ctx: WorkflowContext) -> None:
    while True:
        await ctx.step.run("spin", lambda: None)


async def test_step_limit__fails_a_runaway_loop(app: App) -> None:
    app.settings = app.settings.model_copy(update={"max_steps_per_run": 20})
    handle = await app.workflows.start(runaway)
    async with app.worker(runaway):
        with pytest.raises(WorkflowFailed) as info:
            await handle.result(timeout=10)
    assert info.value.error["type"] == "StepLimitExceeded"
    assert len(await app.workflows.list_steps(handle.run_id)) == 20


attempts_seen: list[int] = []


@workflow(name="retried", retry=RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=0))
async def retried(ctx: WorkflowContext) -> int:
    attempts_seen.append(ctx.attempt)
    once = await ctx.step.run("once", lambda: len(attempts_seen))
    if ctx.attempt < 3:
        raise ValueError("workflow body failed")
    return int(once)


async def test_workflow_retry__reruns_the_workflow_keeping_recorded_steps(app: App) -> None:
    attempts_seen.clear()
    handle = await app.workflows.start(retried)
    async with app.worker(retried):
        assert await handle.result(timeout=10) == 1
    assert attempts_seen == [1, 2, 3]
    run = await app.workflows.get_run(handle.run_id)
    assert run is not None
    assert run.attempt == 3


@workflow(name="shape", version=1)
async def shape_v1(ctx: WorkflowContext) -> str:
    await ctx.step.run("first", lambda: "x")
    await ctx.step.sleep("pause", 0.2)
    return "v1"


@workflow(name="shape", version=1)
async def shape_changed(ctx: WorkflowContext) -> str:
    await ctx.step.sleep("pause", 0.2)
    await ctx.step.run("first", lambda: "x")
    return "changed"


async def test_nondeterminism__reordered_steps_fail_the_run(app: App) -> None:
    handle = await app.workflows.start(shape_v1)
    async with app.worker(shape_v1):
        await assert_eventually(lambda: run_status(app, handle.run_id), timeout=10)
        await assert_eventually(lambda: _is(app, handle.run_id, RunStatus.SLEEPING), timeout=10)
    await app.pool.execute(
        "UPDATE ripple_runs SET available_at = now() WHERE run_id = $1", handle.run_id
    )
    async with app.worker(shape_changed):
        with pytest.raises(WorkflowFailed) as info:
            await handle.result(timeout=10)
    assert info.value.error["type"] == "NonDeterminismError"
    assert "pause" in info.value.error["message"]


async def _is(app: App, run_id: str, status: RunStatus) -> bool:
    return await run_status(app, run_id) == status


@workflow(name="helpers")
async def helpers_wf(ctx: WorkflowContext) -> list[str]:
    values = [ctx.now().isoformat(), str(ctx.uuid()), str(ctx.random())]
    log.append(repr(values))
    await ctx.step.sleep("replay-me", 0.1)
    again = [ctx.now().isoformat(), str(ctx.uuid()), str(ctx.random())]
    return values + again


async def test_deterministic_helpers__replay_the_same_values(app: App) -> None:
    log.clear()
    handle = await app.workflows.start(helpers_wf)
    async with app.worker(helpers_wf):
        out = await handle.result(timeout=10)
    first, second = out[:3], out[3:]
    assert datetime.fromisoformat(first[0]).tzinfo is not None
    assert first != second
    # the run was suspended once: the values before the sleep were replayed, not regenerated
    assert len(set(log)) == 1
    assert len(log) == 2


@workflow(name="versioned", version=1)
async def versioned_v1(ctx: WorkflowContext) -> int:
    return ctx.version


@workflow(name="versioned", version=2)
async def versioned_v2(ctx: WorkflowContext) -> int:
    return ctx.version * 10


async def test_versioning__workers_claim_only_registered_versions(app: App) -> None:
    old: RunHandle[Any] = await app.workflows.start("versioned", version=1)
    new: RunHandle[Any] = await app.workflows.start("versioned", version=2)
    by_name: RunHandle[Any] = await app.workflows.start(
        "versioned"
    )  # no known definition: pinned at claim
    async with app.worker(versioned_v2):
        assert await new.result(timeout=10) == 20
        assert await by_name.result(timeout=10) == 20
        assert await run_status(app, old.run_id) == RunStatus.PENDING
        serves = await app.pool.fetchval("SELECT serves FROM ripple_workers")
        assert serves == [{"workflow": "versioned", "version": 2}]
    async with app.worker(versioned_v1):
        assert await old.result(timeout=10) == 1
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_workers") == 0


class Strict(BaseModel):
    n: int


@workflow(name="strict")
async def strict(ctx: WorkflowContext, inp: Strict) -> int:
    return inp.n


async def test_validation__bad_input_by_name_fails_the_run_at_execution(app: App) -> None:
    fresh = type(app.workflows)(app.pool, app.waker, app.settings)  # knows no definitions
    handle: RunHandle[Any] = await fresh.start("strict", {"n": "nope"})
    async with app.worker(strict):
        with pytest.raises(WorkflowFailed) as info:
            await handle.result(timeout=10)
    assert info.value.error["type"] == "InvalidInput"
    with pytest.raises(InvalidInput):
        await app.workflows.start("Bad Name!")


async def test_list_runs__filters_and_paginates(app: App) -> None:
    ids = [(await app.workflows.start(strict, {"n": i})).run_id for i in range(5)]
    await app.workflows.start(versioned_v1)
    page = await app.workflows.list_runs(workflow="strict", limit=2)
    assert [r.run_id for r in page.items] == ids[::-1][:2]
    page2 = await app.workflows.list_runs(workflow="strict", limit=2, cursor=page.next_cursor)
    page3 = await app.workflows.list_runs(workflow="strict", limit=2, cursor=page2.next_cursor)
    assert [r.run_id for r in page2.items + page3.items] == ids[::-1][2:]
    assert page3.next_cursor is None
    assert len((await app.workflows.list_runs(status="pending")).items) == 6
    since = datetime.now(UTC) + timedelta(hours=1)
    assert (await app.workflows.list_runs(since=since)).items == []
    with pytest.raises(InvalidInput):
        await app.workflows.list_runs(status="bogus")
