from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from pydantic import BaseModel

from ripple.platform.errors import InvalidInput
from ripple.workflows import (
    NonRetriableError,
    RetryPolicy,
    WorkflowContext,
    WorkflowFailed,
    workflow,
)
from tests.integration.workflows.conftest import App


class OrderIn(BaseModel):
    id: int
    qty: int = 1


@dataclass
class Receipt:
    order: int
    total: float


calls: dict[str, int] = {}


def bump(name: str) -> None:
    calls[name] = calls.get(name, 0) + 1


async def price(qty: int) -> float:
    bump("price")
    return qty * 2.5


def make_receipt(order: int, total: float) -> Receipt:
    bump("receipt")
    return Receipt(order, total)


@workflow(name="order", version=1)
async def order_wf(ctx: WorkflowContext, inp: OrderIn) -> Receipt:
    total = await ctx.step.run("price", price, inp.qty)
    receipt = await ctx.step.run("receipt", make_receipt, inp.id, total=total)
    assert isinstance(receipt, Receipt)
    return receipt


async def test_engine__runs_three_kinds_of_step_to_completion(app: App) -> None:
    calls.clear()
    handle = await app.workflows.start(order_wf, OrderIn(id=7, qty=4))
    async with app.worker(order_wf):
        out = await handle.result(timeout=10)
    assert out == Receipt(7, 10.0)
    run = await app.workflows.get_run(handle.run_id)
    assert run is not None
    assert run.status == "completed"
    assert run.output == {"order": 7, "total": 10.0}
    steps = await app.workflows.list_steps(handle.run_id)
    assert [(s.key, s.kind, s.status, s.attempts) for s in steps] == [
        ("price", "run", "completed", 1),
        ("receipt", "run", "completed", 1),
    ]
    assert calls == {"price": 1, "receipt": 1}


async def test_engine__start_validates_input_and_writes_nothing(app: App) -> None:
    with pytest.raises(InvalidInput):
        await app.workflows.start(order_wf, {"id": "not-a-number"})
    page = await app.workflows.list_runs()
    assert page.items == []


async def test_engine__idempotent_start_returns_same_run(app: App) -> None:
    a = await app.workflows.start(order_wf, {"id": 1}, idempotency_key="k1")
    b = await app.workflows.start(order_wf, {"id": 1}, idempotency_key="k1")
    assert a.run_id == b.run_id


@workflow(name="flaky")
async def flaky_wf(ctx: WorkflowContext) -> int:
    async def sometimes() -> int:
        bump("flaky")
        if calls["flaky"] < 3:
            raise ValueError("not yet")
        return calls["flaky"]

    return int(
        await ctx.step.run(
            "try", sometimes, retry=RetryPolicy(max_attempts=5, initial_interval=0.01, jitter=0)
        )
    )


async def test_engine__retries_a_failing_step(app: App) -> None:
    calls.clear()
    handle = await app.workflows.start(flaky_wf)
    async with app.worker(flaky_wf):
        assert await handle.result(timeout=10) == 3
    steps = await app.workflows.list_steps(handle.run_id)
    assert steps[0].attempts == 3


@workflow(name="doomed")
async def doomed_wf(ctx: WorkflowContext) -> None:
    def fail() -> None:
        bump("doomed")
        raise NonRetriableError("no way")

    await ctx.step.run("fail", fail)


async def test_engine__non_retriable_error_fails_the_run(app: App) -> None:
    calls.clear()
    handle = await app.workflows.start(doomed_wf)
    async with app.worker(doomed_wf):
        with pytest.raises(WorkflowFailed) as info:
            await handle.result(timeout=10)
    assert info.value.error["type"] == "NonRetriableError"
    assert "traceback" in info.value.error
    assert calls["doomed"] == 1


@workflow(name="sleeper")
async def sleeper_wf(ctx: WorkflowContext) -> str:
    await ctx.step.sleep("nap", 0.3)
    await ctx.step.sleep("nap", 0.01)
    return "rested"


async def test_engine__durable_sleep_suspends_the_run(app: App) -> None:
    handle = await app.workflows.start(sleeper_wf)
    async with app.worker(sleeper_wf):

        async def sleeping() -> bool:
            run = await app.workflows.get_run(handle.run_id)
            return run is not None and run.status == "sleeping"

        from tests.helpers import assert_eventually

        await assert_eventually(sleeping)
        assert await handle.result(timeout=10) == "rested"
    keys = [s.key for s in await app.workflows.list_steps(handle.run_id)]
    assert keys == ["nap", "nap:1"]


@workflow(name="fanout")
async def fanout_wf(ctx: WorkflowContext, n: int) -> list[int]:
    async def square(i: int) -> int:
        await asyncio.sleep(0.01)
        return i * i

    return list(await asyncio.gather(*(ctx.step.run("sq", square, i) for i in range(n))))


async def test_engine__concurrent_steps_with_gather(app: App) -> None:
    handle = await app.workflows.start(fanout_wf, 5)
    async with app.worker(fanout_wf):
        assert await handle.result(timeout=10) == [0, 1, 4, 9, 16]
    keys = [s.key for s in await app.workflows.list_steps(handle.run_id)]
    assert keys == ["sq", "sq:1", "sq:2", "sq:3", "sq:4"]


@workflow(name="backoff")
async def backoff_wf(ctx: WorkflowContext, delay: float) -> int:
    from ripple.workflows import RetryAfterError

    def later() -> int:
        bump("later")
        if calls["later"] == 1:
            raise RetryAfterError("busy", delay)
        return calls["later"]

    return int(await ctx.step.run("later", later))


async def test_engine__retry_after_parks_the_run_durably(app: App) -> None:
    from tests.helpers import assert_eventually

    calls.clear()
    # An hour's delay: the run stays parked for as long as the test looks at it.
    handle = await app.workflows.start(backoff_wf, 3600.0)
    async with app.worker(backoff_wf):

        async def parked() -> bool:
            run = await app.workflows.get_run(handle.run_id)
            return run is not None and run.status == "sleeping"

        await assert_eventually(parked)
        steps = await app.workflows.list_steps(handle.run_id)
        assert (steps[0].status, steps[0].attempts) == ("retrying", 1)
        assert steps[0].error is not None
        assert steps[0].error["type"] == "RetryAfterError"
    # Parked in the database, not in the worker: a new worker retries it once it is due.
    assert await app.pool.fetchval(
        "SELECT available_at > now() + interval '50 minutes' FROM ripple_runs WHERE run_id = $1",
        handle.run_id,
    )
    await app.pool.execute(
        "UPDATE ripple_runs SET available_at = now() WHERE run_id = $1", handle.run_id
    )
    await app.pool.execute(
        "UPDATE ripple_steps SET due_at = now() WHERE run_id = $1 AND due_at IS NOT NULL",
        handle.run_id,
    )
    async with app.worker(backoff_wf):
        assert await handle.result(timeout=10) == 2
    assert calls["later"] == 2


@workflow(name="slow-step")
async def slow_step_wf(ctx: WorkflowContext) -> str:
    async def slow() -> str:
        bump("slow")
        await asyncio.sleep(10)
        return "never"

    try:
        await ctx.step.run("slow", slow, timeout=0.05, retry=RetryPolicy(max_attempts=2))
    except TimeoutError:
        return "timed out"
    return "no"


async def test_engine__step_timeout_counts_as_a_failed_attempt(app: App) -> None:
    calls.clear()
    handle = await app.workflows.start(slow_step_wf)
    async with app.worker(slow_step_wf):
        assert await handle.result(timeout=10) == "timed out"
    assert calls["slow"] == 2


@workflow(name="alarm")
async def alarm_wf(ctx: WorkflowContext) -> str:
    from datetime import timedelta

    await ctx.step.sleep_until("wake", ctx.now() + timedelta(milliseconds=200))
    return "up"


async def test_engine__sleep_until_wakes_at_the_given_time(app: App) -> None:
    handle = await app.workflows.start(alarm_wf)
    async with app.worker(alarm_wf):
        assert await handle.result(timeout=10) == "up"
    steps = {s.key: s for s in await app.workflows.list_steps(handle.run_id)}
    wake = steps["wake"]
    assert wake.completed_at is not None
    assert wake.due_at is not None
    assert wake.completed_at >= wake.due_at


class PaymentDeclined(Exception):
    pass


@workflow(name="catcher")
async def catcher_wf(ctx: WorkflowContext) -> str:
    def decline() -> None:
        bump("decline")
        raise PaymentDeclined("card declined")

    try:
        await ctx.step.run("pay", decline, retry=RetryPolicy(max_attempts=1))
    except PaymentDeclined as exc:
        outcome = f"declined: {exc}"
    await ctx.step.sleep("replay-after", 0.2)  # the next pass replays the failed step
    return outcome


async def test_engine__replayed_failed_step_raises_its_recorded_exception_type(app: App) -> None:
    calls.clear()
    handle = await app.workflows.start(catcher_wf)
    async with app.worker(catcher_wf):
        assert await handle.result(timeout=10) == "declined: card declined"
    assert calls["decline"] == 1
