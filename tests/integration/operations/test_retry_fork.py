"""Retry in place and fork from a step: recorded steps are not run again, the
failed step is, compensations are not undone, and bad input changes nothing."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from ripple.platform.client import Client
from ripple.platform.errors import Conflict, InvalidInput, NotFound
from ripple.workflows import (
    NonRetriableError,
    RollbackError,
    RunStatus,
    Worker,
    WorkflowCanceled,
    WorkflowContext,
    WorkflowFailed,
    workflow,
)
from tests.helpers import assert_eventually

calls: Counter[str] = Counter()
broken = {"charge": True, "rollback": True}


def _step(name: str) -> Any:
    def run() -> str:
        calls[name] += 1
        return f"{name}-done"

    return run


def _charge() -> str:
    calls["charge"] += 1
    if broken["charge"]:
        raise NonRetriableError("card processor rejected the request")
    return "charged"


@workflow(name="order-flow")
async def order_flow(ctx: WorkflowContext, inp: dict[str, Any]) -> dict[str, Any]:
    reserved = await ctx.step.run("reserve", _step("reserve"))
    charged = await ctx.step.run("charge", _charge)
    shipped = await ctx.step.run("ship", _step("ship"))
    return {"reserved": reserved, "charged": charged, "shipped": shipped, "input": inp}


def _undo_reserve(value: str) -> None:
    calls["undo-reserve"] += 1


def _fragile() -> str:
    calls["fragile"] += 1
    if broken["rollback"]:
        raise RollbackError("inventory mismatch")
    return "ok"


@workflow(name="saga")
async def saga(ctx: WorkflowContext) -> str:
    await ctx.step.run("reserve", _step("saga-reserve"), compensate=_undo_reserve)
    await ctx.step.run("fragile", _fragile)
    await ctx.step.run("notify", _step("saga-notify"))
    return "done"


@workflow(name="three-steps")
async def three_steps(ctx: WorkflowContext, inp: dict[str, Any]) -> list[Any]:
    a = await ctx.step.run("a", _step("a"))
    b = await ctx.step.run("b", _step("b"))
    c = await ctx.step.run("c", _step("c"))
    return [a, b, c, inp["n"]]


@workflow(name="parked")
async def parked(ctx: WorkflowContext) -> Any:
    return await ctx.step.wait_for_event("go", event="never.happens", timeout=3600)


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()
    broken.update(charge=True, rollback=True)


async def test_retry__after_non_retriable_failure_recorded_steps_do_not_rerun(
    client: Client,
) -> None:
    async with Worker(client, [order_flow], webhooks=False, sweeper=False):
        handle = await client.start(order_flow, {"id": 7})
        with pytest.raises(WorkflowFailed):
            await handle.result(timeout=10)
        assert calls == Counter({"reserve": 1, "charge": 1})

        broken["charge"] = False  # the bug is fixed
        retried = await client.retry(handle.run_id)
        assert retried.run_id == handle.run_id
        # a result() waiter sees the new outcome
        out = await handle.result(timeout=10)

    assert out == {
        "reserved": "reserve-done",
        "charged": "charged",
        "shipped": "ship-done",
        "input": {"id": 7},
    }
    assert calls == Counter({"reserve": 1, "charge": 2, "ship": 1})
    run = await client.get_run(handle.run_id)
    assert run is not None
    assert run.status == RunStatus.COMPLETED
    assert run.error is None
    steps = {s.key: s for s in await client.list_steps(handle.run_id)}
    assert steps["charge"].attempts == 1  # a fresh attempt budget, not attempt 2 of 1


async def test_retry__after_a_rollback_compensated_steps_run_again(client: Client) -> None:
    async with Worker(client, [saga], webhooks=False, sweeper=False):
        handle = await client.start(saga)
        with pytest.raises(WorkflowFailed):
            await handle.result(timeout=10)
        assert calls["undo-reserve"] == 1

        broken["rollback"] = False
        await client.retry(handle.run_id)
        assert await handle.result(timeout=10) == "done"

    # The compensation is not undone; the step it undid runs again (its recorded result was
    # no longer true), and the compensation is not repeated.
    assert calls == Counter({"saga-reserve": 2, "undo-reserve": 1, "fragile": 2, "saga-notify": 1})
    keys = [s.key for s in await client.list_steps(handle.run_id)]
    assert keys == ["reserve", "fragile", "notify"]


async def test_retry__of_canceled_run_resumes_it(client: Client) -> None:
    async with Worker(client, [parked], webhooks=False, sweeper=False):
        handle = await client.start(parked)

        async def waiting() -> bool:
            run = await client.get_run(handle.run_id)
            return run is not None and run.status == RunStatus.WAITING

        await assert_eventually(waiting)
        assert await client.cancel(handle.run_id)
        with pytest.raises(WorkflowCanceled):
            await handle.result(timeout=5)
        await client.retry(handle.run_id)
        await assert_eventually(waiting)
        await client.signal_matching("never.happens", {"x": 1})
        assert await handle.result(timeout=10) == {"x": 1}


async def test_retry__refused_for_active_completed_and_unknown_runs(client: Client) -> None:
    active = await client.start(parked)  # no worker: stays pending
    with pytest.raises(Conflict, match="still active"):
        await client.retry(active.run_id)
    async with Worker(client, [three_steps], webhooks=False, sweeper=False):
        done = await client.start(three_steps, {"n": 1})
        await done.result(timeout=10)
    with pytest.raises(Conflict, match="completed"):
        await client.retry(done.run_id)
    with pytest.raises(NotFound):
        await client.retry("no-such-run")
    run = await client.get_run(active.run_id)
    assert run is not None
    assert run.status == RunStatus.PENDING
    assert run.attempt == 0


async def test_fork__from_the_middle_step_reruns_it_and_what_follows(client: Client) -> None:
    async with Worker(client, [three_steps], webhooks=False, sweeper=False):
        source = await client.start(three_steps, {"n": 1})
        assert await source.result(timeout=10) == ["a-done", "b-done", "c-done", 1]

        fork = await client.fork(source.run_id, from_step="b")
        assert fork.run_id != source.run_id
        assert await fork.result(timeout=10) == ["a-done", "b-done", "c-done", 1]

        with_input = await client.fork(source.run_id, from_step="c", input={"n": 2})
        assert await with_input.result(timeout=10) == ["a-done", "b-done", "c-done", 2]

    assert calls == Counter({"a": 1, "b": 2, "c": 3})
    run = await client.get_run(fork.run_id)
    assert run is not None
    assert run.forked_from == source.run_id
    original = await client.get_run(source.run_id)
    assert original is not None
    assert original.forked_from is None


async def test_fork__bad_input_changes_nothing(client: Client) -> None:
    async with Worker(client, [three_steps], webhooks=False, sweeper=False):
        source = await client.start(three_steps, {"n": 1})
        await source.result(timeout=10)
    with pytest.raises(InvalidInput, match=r"'nope' is not in the journal.*a, b, c"):
        await client.fork(source.run_id, from_step="nope")
    with pytest.raises(NotFound):
        await client.fork("no-such-run", from_step="a")
    page = await client.list_runs(workflow="three-steps")
    assert [r.run_id for r in page.items] == [source.run_id]
