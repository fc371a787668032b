"""Flow control enforced by the claim: per-key concurrency, priority, throttle."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from ripple.platform.errors import InvalidInput
from ripple.workflows import (
    Concurrency,
    Debounce,
    RunStatus,
    Throttle,
    WorkflowContext,
    store,
    workflow,
)
from ripple.workflows.authoring.flow import check_key_path
from ripple.workflows.runtime import worker as worker_module
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App

# key -> runs of that key executing now / the most seen at once; "all": across keys
active: dict[str, int] = {}
peak: dict[str, int] = {}
order: list[str] = []


def _enter(key: str) -> None:
    for k in (key, "all"):
        active[k] = active.get(k, 0) + 1
        peak[k] = max(peak.get(k, 0), active[k])


def _leave(key: str) -> None:
    for k in (key, "all"):
        active[k] -= 1


@pytest.fixture(autouse=True)
def _reset() -> None:
    active.clear()
    peak.clear()
    order.clear()


@workflow(name="per-customer", concurrency=Concurrency(limit=1, key="customer.id"))
async def per_customer(ctx: WorkflowContext, inp: dict[str, Any]) -> str:
    key = str(inp["customer"]["id"])

    async def body() -> str:
        _enter(key)
        try:
            await asyncio.sleep(0.05)  # the workload: a window in which overlaps would show
        finally:
            _leave(key)
        return key

    return str(await ctx.step.run("work", body))


@workflow(name="gated", concurrency=Concurrency(limit=1, key="k"))
async def gated(ctx: WorkflowContext, inp: dict[str, Any]) -> Any:
    return await ctx.step.wait_for_event("go", event="gate.open", match={"n": inp["n"]})


@workflow(name="ordered", concurrency=Concurrency(limit=1))
async def ordered(ctx: WorkflowContext, name: str) -> str:
    order.append(name)
    return name


@workflow(name="throttled", throttle=Throttle(limit=2, period=timedelta(seconds=1), key="k"))
async def throttled(ctx: WorkflowContext, inp: dict[str, Any]) -> int:
    return int(inp["n"])


async def test_concurrency__one_run_per_key_and_keys_side_by_side(app: App) -> None:
    app.workflows.register(per_customer)
    handles = [
        await app.workflows.start(per_customer, {"customer": {"id": key}})
        for key in ("a", "b", "c")
        for _ in range(4)
    ]
    async with app.worker(per_customer, concurrency=10):
        for handle in handles:
            await handle.result(timeout=20)
    assert peak["a"] == peak["b"] == peak["c"] == 1
    assert peak["all"] > 1
    # every slot was given back
    assert await app.pool.fetchval("SELECT sum(active) FROM ripple_concurrency_slots") == 0


@pytest.mark.parametrize("hold", [5.0, 0.0], ids=["held", "no-hold"])
async def test_concurrency__a_governed_plain_claim_switches_to_flow_control_claims(
    app: App, monkeypatch: pytest.MonkeyPatch, hold: float
) -> None:
    """A plain claim that finds keyed runs hands them to flow control, and the worker claims
    with flow control directly for GOVERNED_HOLD seconds (0: it tries plainly every time)."""
    monkeypatch.setattr(worker_module, "GOVERNED_HOLD", hold)
    claims: list[str] = []
    plain, full = store.claim_runs_plain, store.claim_runs

    async def counted_plain(*args: Any, **kw: Any) -> store.PlainClaim:
        found = await plain(*args, **kw)
        claims.append("governed" if found.governed else "plain")
        return found

    async def counted_full(*args: Any, **kw: Any) -> list[store.ClaimedRun]:
        claims.append("full")
        return await full(*args, **kw)

    monkeypatch.setattr(store, "claim_runs_plain", counted_plain)
    monkeypatch.setattr(store, "claim_runs", counted_full)
    handles = [await app.workflows.start(per_customer, {"customer": {"id": "k"}}) for _ in range(3)]
    async with app.worker(per_customer, concurrency=10):
        for handle in handles:
            await handle.result(timeout=20)
    assert peak["k"] == 1
    assert claims[0] == "governed"
    if hold:  # every claim after the first went to flow control directly (the test < 5 s)
        assert set(claims[1:]) == {"full"}
    else:
        assert "full" not in claims
        assert claims.count("governed") >= 3  # each run was claimed after a plain attempt


async def test_concurrency__canceling_the_active_run_frees_its_slot(app: App) -> None:
    first = await app.workflows.start(gated, {"k": "z", "n": 1})
    second = await app.workflows.start(gated, {"k": "z", "n": 2})
    async with app.worker(gated):

        async def blocked() -> bool:
            run = await app.workflows.get_run(second.run_id)
            return run is not None and run.blocked_by == "concurrency"

        await assert_eventually(blocked)
        assert await app.workflows.cancel(first.run_id)

        async def second_waits() -> bool:
            run = await app.workflows.get_run(second.run_id)
            return run is not None and run.status == RunStatus.WAITING

        await assert_eventually(second_waits)
        await app.workflows.signal_matching("gate.open", {"n": 2})
        assert await second.result(timeout=10) == {"n": 2}


async def test_concurrency__a_waiting_run_holds_its_slot(app: App) -> None:
    first = await app.workflows.start(gated, {"k": "x", "n": 1})
    second = await app.workflows.start(gated, {"k": "x", "n": 2})
    other = await app.workflows.start(gated, {"k": "y", "n": 3})
    async with app.worker(gated):

        async def status(run_id: str) -> tuple[RunStatus, str | None]:
            run = await app.workflows.get_run(run_id)
            assert run is not None
            return run.status, run.blocked_by

        async def held() -> bool:
            return (
                await status(first.run_id) == (RunStatus.WAITING, None)
                and await status(second.run_id) == (RunStatus.PENDING, "concurrency")
                and await status(other.run_id) == (RunStatus.WAITING, None)
            )

        await assert_eventually(held)
        await app.workflows.signal_matching("gate.open", {"n": 1})
        assert await first.result(timeout=10) == {"n": 1}
        # the freed slot wakes the parked run, which now waits in its turn

        async def second_waits() -> bool:
            return await status(second.run_id) == (RunStatus.WAITING, None)

        await assert_eventually(second_waits)
        await app.workflows.signal_matching("gate.open", {"n": 2})
        await app.workflows.signal_matching("gate.open", {"n": 3})
        assert await second.result(timeout=10) == {"n": 2}
        assert await other.result(timeout=10) == {"n": 3}


async def test_priority__higher_first_fifo_within(app: App) -> None:
    app.workflows.register(ordered)
    handles = [await app.workflows.start(ordered, f"low{i}") for i in range(3)]
    handles.append(await app.workflows.start(ordered, "high0", priority=5))
    handles.append(await app.workflows.start(ordered, "mid0", priority=2))
    handles.append(await app.workflows.start(ordered, "high1", priority=5))
    async with app.worker(ordered, concurrency=1):
        for handle in handles:
            await handle.result(timeout=10)
    assert order == ["high0", "high1", "mid0", "low0", "low1", "low2"]


async def test_throttle__never_more_than_limit_starts_within_the_period(app: App) -> None:
    handles = [await app.workflows.start(throttled, {"k": "a", "n": i}) for i in range(7)]
    other = await app.workflows.start(throttled, {"k": "b", "n": 99})
    async with app.worker(throttled, concurrency=10):
        assert [await h.result(timeout=20) for h in handles] == list(range(7))
        assert await other.result(timeout=20) == 99
    runs = [await app.workflows.get_run(h.run_id) for h in handles]
    starts = sorted(run.started_at for run in runs if run is not None and run.started_at)
    assert len(starts) == 7
    for first, third in zip(starts, starts[2:], strict=False):
        assert third - first >= timedelta(seconds=1)


async def test_throttle__blocked_runs_say_why(app: App) -> None:
    handles = [await app.workflows.start(throttled, {"k": "a", "n": i}) for i in range(3)]
    async with app.worker(throttled, concurrency=10):

        async def third_blocked() -> bool:
            run = await app.workflows.get_run(handles[2].run_id)
            return run is not None and run.blocked_by == "throttle"

        await assert_eventually(third_blocked)
        assert await handles[2].result(timeout=10) == 2


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Concurrency(limit=0), "concurrency.limit"),
        (lambda: Concurrency(limit=1, key="a..b"), "concurrency.key"),
        (lambda: Throttle(limit=1, period=0), "throttle.period"),
        (lambda: Throttle(limit=1, period=timedelta(seconds=-1)), "throttle.period"),
        (lambda: Debounce(period=1, key="a b"), "debounce.key"),
        (lambda: Debounce(period=1, max_wait=0), "debounce.max_wait"),
    ],
)
def test_flow_options__bad_input_is_invalid_input(make: Any, field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        make()
    assert isinstance(info.value, ValueError)
    assert info.value.field == field


def test_key_path__dotted_names_only() -> None:
    assert check_key_path("customer.id", "key") == "customer.id"
    for bad in ("", ".a", "a.", "a b", "a/b"):
        with pytest.raises(InvalidInput):
            check_key_path(bad, "key")


async def test_priority__out_of_range_is_invalid_input(app: App) -> None:
    with pytest.raises(InvalidInput):
        await app.workflows.start(ordered, "x", priority=-1)
    page = await app.workflows.list_runs(workflow="ordered")
    assert page.items == []


@workflow(name="debounced", debounce=Debounce(period=0.3, key="user"))
async def debounced(ctx: WorkflowContext, inp: dict[str, Any]) -> int:
    return int(inp["n"])


@workflow(name="capped", debounce=Debounce(period=600, max_wait=0.3))
async def capped(ctx: WorkflowContext, inp: dict[str, Any]) -> int:
    return int(inp["n"])


async def test_debounce__starts_collapse_into_one_run_with_the_last_input(app: App) -> None:
    handles = [await app.workflows.start(debounced, {"user": "u", "n": i}) for i in range(5)]
    other = await app.workflows.start(debounced, {"user": "v", "n": 9})
    assert len({h.run_id for h in handles}) == 1
    assert other.run_id != handles[0].run_id
    run = await app.workflows.get_run(handles[0].run_id)
    assert run is not None
    assert (run.status, run.blocked_by) == (RunStatus.PENDING, "debounce")
    async with app.worker(debounced):
        assert await handles[0].result(timeout=10) == 4
        assert await other.result(timeout=10) == 9
        again = await app.workflows.start(debounced, {"user": "u", "n": 5})
        assert again.run_id != handles[0].run_id  # the first run started: a new one
        assert await again.result(timeout=10) == 5
    page = await app.workflows.list_runs(workflow="debounced")
    assert len(page.items) == 3


async def test_debounce__max_wait_caps_the_push_back(app: App) -> None:
    first = await app.workflows.start(capped, {"n": 1})
    second = await app.workflows.start(capped, {"n": 2})
    assert first.run_id == second.run_id
    async with app.worker(capped):
        # due 0.3 s after the first start, not 600 s after the last
        assert await first.result(timeout=10) == 2


async def test_debounce__idempotency_key_returns_the_same_run(app: App) -> None:
    a = await app.workflows.start(debounced, {"user": "w", "n": 1}, idempotency_key="k1")
    b = await app.workflows.start(debounced, {"user": "w", "n": 2}, idempotency_key="k1")
    assert a.run_id == b.run_id
    run = await app.workflows.get_run(a.run_id)
    assert run is not None
    assert run.input == {"user": "w", "n": 1}


async def test_concurrency__a_freed_slot_starts_the_next_run_at_once_not_at_the_next_poll(
    settings: Any,
) -> None:
    from tests.integration.workflows.conftest import close_app, make_app

    # Polls 60 s apart: only the finished run's hint can start the parked ones in time.
    app = await make_app(settings.model_copy(update={"poll_interval": 60.0}))
    try:
        app.workflows.register(ordered)
        handles = [await app.workflows.start(ordered, name) for name in ("a", "b", "c")]
        async with app.worker(ordered):
            await handles[0].result(timeout=10)
            # Without a hint the worker finds a freed slot's next run only when something
            # else wakes it (seconds here); with one, at once.
            for handle in handles[1:]:
                await handle.result(timeout=3)
        assert sorted(order) == ["a", "b", "c"]
    finally:
        await close_app(app)
