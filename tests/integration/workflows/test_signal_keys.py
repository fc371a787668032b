"""Signals with an idempotency key are retry-safe: a repeat is acknowledged
with the first call's result and observed once, in order."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from ripple.platform.errors import Conflict, InvalidInput, NotFound
from ripple.platform.ops.sweeper import Sweeper
from ripple.workflows import WorkflowContext, workflow
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App
from tests.integration.workflows.test_waits import is_waiting

N = 40


@workflow(name="collect-signals")
async def collect_signals(ctx: WorkflowContext, n: int) -> list[Any]:
    got = []
    for _ in range(n):
        value = await ctx.step.wait_for_event("tick")  # keys tick, tick#2, ... (auto-indexed)
        assert value is not None
        got.append(value["i"])
    return got


@workflow(name="collect-events")
async def collect_events(ctx: WorkflowContext, n: int) -> list[Any]:
    got = []
    for i in range(n):
        value = await ctx.step.wait_for_event(f"e-{i}", event="storm.tick", match={"run": "x"})
        assert value is not None
        got.append(value["i"])
    return got


async def test_retried_signals_are_observed_once_in_order(app: App) -> None:
    handle = await app.workflows.start(collect_signals, N)
    first = []
    for i in range(N):  # all before the run waits: kept in its inbox, then a retry of each
        first.append(
            await app.workflows.signal(handle.run_id, "tick", {"i": i}, idempotency_key=f"k{i}")
        )
        again = await app.workflows.signal(handle.run_id, "tick", {"i": i}, idempotency_key=f"k{i}")
        assert again == first[-1]
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_signals") == N
    async with app.worker(collect_signals):
        # retries while the run consumes them, concurrently with the worker
        retried = await asyncio.gather(
            *(
                app.workflows.signal(handle.run_id, "tick", {"i": i}, idempotency_key=f"k{i}")
                for i in range(N)
            )
        )
        assert await handle.result(timeout=30) == list(range(N))
    assert retried == first
    assert all(r.buffered and not r.delivered for r in first)
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_signals") == 0
    # the run ended: a retry still gets the first answer, a new signal the 409
    again = await app.workflows.signal(handle.run_id, "tick", {"i": 0}, idempotency_key="k0")
    assert again == first[0]
    with pytest.raises(Conflict):
        await app.workflows.signal(handle.run_id, "tick", {"i": 0}, idempotency_key="new")


async def test_retried_signal_to_a_waiting_run_resolves_one_wait(app: App) -> None:
    handle = await app.workflows.start(collect_signals, 2)
    async with app.worker(collect_signals):
        await assert_eventually(lambda: is_waiting(app, handle.run_id))
        res = await app.workflows.signal(handle.run_id, "tick", {"i": 0}, idempotency_key="a")
        assert res.delivered
        # concurrent retries of the same key while the run moves on to the second wait
        retries = await asyncio.gather(
            *(
                app.workflows.signal(handle.run_id, "tick", {"i": 9}, idempotency_key="a")
                for _ in range(10)
            )
        )
        assert all(r == res for r in retries)
        await app.workflows.signal(handle.run_id, "tick", {"i": 1}, idempotency_key="b")
        assert await handle.result(timeout=10) == [0, 1]


async def test_retried_signal_matching_resumes_once(app: App) -> None:
    handle = await app.workflows.start(collect_events, N)
    counts = []
    async with app.worker(collect_events):
        for i in range(N):
            step = f"e-{i}"
            await assert_eventually(functools.partial(waits_on, app, handle.run_id, step))
            payload = {"run": "x", "i": i}
            counts.append(
                await app.workflows.signal_matching("storm.tick", payload, idempotency_key=f"m{i}")
            )
            # the retry may land while the run already waits on the next step: it must not
            # resolve that one
            again = await app.workflows.signal_matching(
                "storm.tick", payload, idempotency_key=f"m{i}"
            )
            assert again == counts[-1] == 1
        assert await handle.result(timeout=30) == list(range(N))
    # same key on another event name is another key
    assert await app.workflows.signal_matching("other.tick", {}, idempotency_key="m0") == 0


async def waits_on(app: App, run_id: str, step_key: str) -> bool:
    sql = "SELECT count(*) FROM ripple_waits WHERE run_id = $1 AND step_key = $2"
    return bool(await app.pool.fetchval(sql, run_id, step_key))


async def test_signal_key_checks(app: App) -> None:
    with pytest.raises(NotFound):
        await app.workflows.signal("nope", "tick", {}, idempotency_key="k")
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_signal_keys") == 0
    for bad in ("", "x" * 256):
        with pytest.raises(InvalidInput):
            await app.workflows.signal("nope", "tick", {}, idempotency_key=bad)
        with pytest.raises(InvalidInput):
            await app.workflows.signal_matching("e", {}, idempotency_key=bad)


async def test_signal_keys_expire_with_event_retention(app: App) -> None:
    handle = await app.workflows.start(collect_signals, 1)
    await app.workflows.signal(handle.run_id, "tick", {"i": 0}, idempotency_key="old")
    await app.workflows.signal(handle.run_id, "tick", {"i": 1}, idempotency_key="new")
    await app.pool.execute(
        "UPDATE ripple_signal_keys SET created_at = now() - interval '8 days' "
        "WHERE idempotency_key = 'old'"
    )
    result = await Sweeper(app.pool, app.settings, runs=app.workflows.upkeep).sweep_once()
    assert result["signal_keys"] == 1
    left = await app.pool.fetch("SELECT idempotency_key FROM ripple_signal_keys")
    assert [r["idempotency_key"] for r in left] == ["new"]
