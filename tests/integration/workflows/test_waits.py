"""wait_for_event, signals (buffered, delivered, storm), payload matching, event waits."""

from __future__ import annotations

import asyncio
import functools
from datetime import UTC, datetime
from typing import Any

import pytest

from ripple.platform.core.db import transaction
from ripple.platform.errors import Conflict, NotFound, Unavailable
from ripple.workflows import WorkflowContext, workflow
from ripple.workflows import store as wf_store
from ripple.workflows.runs.records import RunStatus, SignalResult
from ripple.workflows.store import waits as waits_sql
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App

INFINITY = datetime.max.replace(tzinfo=UTC)


async def is_waiting(app: App, run_id: str) -> bool:
    run = await app.workflows.get_run(run_id)
    return run is not None and run.status == RunStatus.WAITING


@workflow(name="approval")
async def approval(ctx: WorkflowContext, match: dict[str, Any] | None) -> Any:
    return await ctx.step.wait_for_event("approved", match=match, timeout=30)


async def test_signal__delivered_to_a_waiting_run(app: App) -> None:
    handle = await app.workflows.start(approval, None)
    async with app.worker(approval):
        await assert_eventually(lambda: is_waiting(app, handle.run_id))
        res = await app.workflows.signal(handle.run_id, "approved", {"by": "ann"})
        assert (res.delivered, res.buffered) == (True, False)
        assert await handle.result(timeout=10) == {"by": "ann"}
    steps = await app.workflows.list_steps(handle.run_id)
    assert [(s.key, s.kind, s.status, s.output) for s in steps] == [
        ("approved", "wait", "completed", {"by": "ann"})
    ]


async def test_signal__buffered_until_a_matching_wait_exists(app: App) -> None:
    handle = await app.workflows.start(approval, {"ok": True})
    first = await app.workflows.signal(handle.run_id, "approved", {"ok": False, "n": 1})
    second = await app.workflows.signal(handle.run_id, "approved", {"ok": True, "n": 2})
    third = await app.workflows.signal(handle.run_id, "approved", {"ok": True, "n": 3})
    assert all(r.buffered and not r.delivered for r in (first, second, third))
    async with app.worker(approval):
        assert await handle.result(timeout=10) == {"ok": True, "n": 2}  # earliest match
    left = await app.pool.fetch("SELECT payload FROM ripple_signals ORDER BY id")
    assert [r["payload"]["n"] for r in left] == [1, 3]


@pytest.mark.parametrize(
    ("match", "payload", "resolves"),
    [
        ({"user": {"id": 42}}, {"user": {"id": 42, "name": "a"}, "x": 1}, True),
        ({"user": {"id": 42}}, {"user": {"id": 43}}, False),
        ({"tags": ["a"]}, {"tags": ["b", "a"]}, True),
        ({"tags": ["c"]}, {"tags": ["b", "a"]}, False),
        ({"missing": 1}, {"other": 1}, False),
        (None, {"anything": [1, 2]}, True),
    ],
)
async def test_signal__payload_must_contain_match(
    app: App, match: dict[str, Any] | None, payload: dict[str, Any], resolves: bool
) -> None:
    handle = await app.workflows.start(approval, match)
    async with app.worker(approval):
        await assert_eventually(lambda: is_waiting(app, handle.run_id))
        res = await app.workflows.signal(handle.run_id, "approved", payload)
        assert res.delivered is resolves
        if resolves:
            assert await handle.result(timeout=10) == payload


@workflow(name="impatient")
async def impatient(ctx: WorkflowContext) -> Any:
    got = await ctx.step.wait_for_event("reply", timeout=0.2)
    return {"got": got}


async def test_wait__times_out_with_none(app: App) -> None:
    handle = await app.workflows.start(impatient)
    async with app.worker(impatient):
        assert await handle.result(timeout=10) == {"got": None}


async def test_signal__to_unknown_or_finished_run_is_a_clear_error(app: App) -> None:
    with pytest.raises(NotFound):
        await app.workflows.signal("nope", "approved", {})
    handle = await app.workflows.start(impatient)
    async with app.worker(impatient):
        await handle.result(timeout=10)
    with pytest.raises(Conflict):
        await app.workflows.signal(handle.run_id, "reply", {})


@workflow(name="counter")
async def counter(ctx: WorkflowContext, n: int) -> int:
    total = 0
    for _ in range(n):
        got = await ctx.step.wait_for_event("tick")
        assert got is not None
        total += int(got["v"])
    return total


async def test_signal__storm_of_1000_concurrent_signals_is_consumed_exactly_once(
    app: App,
) -> None:
    n = 1000
    app.settings = app.settings.model_copy(update={"max_steps_per_run": 5000})
    handle = await app.workflows.start(counter, n)

    async def send(i: int) -> SignalResult:
        # A storm may outlast RIPPLE_DB_TIMEOUT for a caller waiting for a connection: as the
        # client contract says, such a call is retried with its idempotency key.
        while True:
            try:
                return await app.workflows.signal(
                    handle.run_id, "tick", {"v": i}, idempotency_key=f"tick-{i}"
                )
            except Unavailable:
                continue

    async with app.worker(counter):
        results = await asyncio.gather(*(send(i) for i in range(n)))
        assert await handle.result(timeout=60) == sum(range(n))
    assert sum(r.delivered for r in results) + sum(r.buffered for r in results) == n
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_signals") == 0
    outputs = await app.pool.fetch(
        "SELECT output FROM ripple_steps WHERE run_id = $1", handle.run_id
    )
    assert sorted(int(r["output"]["v"]) for r in outputs) == list(range(n))


@workflow(name="verify")
async def verify(ctx: WorkflowContext, user: int) -> Any:
    return await ctx.step.wait_for_event(
        "verified", event="user.verified", match={"userId": user}, timeout=60
    )


async def test_signal_matching__resumes_only_runs_whose_match_the_payload_contains(
    app: App,
) -> None:
    handles = [await app.workflows.start(verify, i) for i in range(5)]
    async with app.worker(verify):
        for h in handles:
            await assert_eventually(functools.partial(is_waiting, app, h.run_id))
        assert await app.workflows.signal_matching("user.verified", {"userId": 3, "x": 1}) == 1
        assert await handles[3].result(timeout=10) == {"userId": 3, "x": 1}
        assert await app.workflows.signal_matching("user.other", {"userId": 1}) == 0
        async with transaction(app.pool) as conn:  # the publisher's path
            assert await app.workflows.resolve_event_waits(conn, "user.verified", {"userId": 1})
        app.workflows.notify_runs_ready()
        assert await handles[1].result(timeout=10) == {"userId": 1}
        assert await is_waiting(app, handles[0].run_id)


async def test_waits__are_found_by_index_not_by_scanning(app: App) -> None:
    await app.pool.execute(
        "INSERT INTO ripple_waits (run_id, step_key, step_seq, name, event, match) "
        "SELECT 'r' || i, 'w', 0, 'n' || (i % 50), 'topic.' || (i % 200), "
        "jsonb_build_object('k', i) FROM generate_series(1, 20000) AS i"
    )
    await app.pool.execute("ANALYZE ripple_waits")
    for sql, args in [
        (waits_sql._RESOLVE_EVENT_WAITS, ["topic.7", {"k": 7}, ["r7"]]),
        (waits_sql._LOCK_EVENT_WAIT_RUNS, ["topic.7", {"k": 7}]),
        (waits_sql._SIGNAL_RUN, ["r7", "n7", {"k": 7}]),
    ]:
        rows = await app.pool.fetch("EXPLAIN " + sql, *args)
        plan = "\n".join(r[0] for r in rows)
        assert "Seq Scan on ripple_waits" not in plan, plan
        assert "ripple_waits_event" in plan or "ripple_waits_name" in plan, plan


async def test_wait__run_resumes_on_another_worker_after_its_worker_stopped(app: App) -> None:
    handle = await app.workflows.start(approval, None)
    async with app.worker(approval):
        await assert_eventually(lambda: is_waiting(app, handle.run_id))
    await app.workflows.signal(handle.run_id, "approved", {"late": True})
    async with app.worker(approval):
        assert await handle.result(timeout=10) == {"late": True}


async def test_event_wait__registered_while_a_publish_resolves_is_not_lost(app: App) -> None:
    # A publish locks the runs whose waits it sees, then resolves waits. A run registering a
    # wait on the same topic in between, and suspending right after, must not end up parked
    # forever with its wait step completed (its wake-up lost): the publish only resolves the
    # waits of runs it locked, and the late wait gets the next matching event.
    for run_id in ("q", "r"):
        await app.pool.execute(
            "INSERT INTO ripple_runs (run_id, workflow, version, status, epoch, started_at) "
            "VALUES ($1, 'waiter', 1, 'running', 1, now())",
            run_id,
        )
    pending = {"key": "w", "seq": 0, "kind": "wait", "status": "pending", "attempts": 1}
    await _fence(app.pool, "q", [pending])
    await _wait_on(app.pool, "q", "order.paid")
    async with transaction(app.pool) as publisher:
        locked = await wf_store.lock_event_wait_runs(
            publisher, event="order.paid", payload={"id": 1}
        )
        assert locked == ["q"]
        # run r registers its wait now (its own transaction commits)
        async with transaction(app.pool) as run_r:
            await _fence(run_r, "r", [pending])
            await _wait_on(run_r, "r", "order.paid")
        # ... and the publisher's second statement (as resolve_event_waits runs it) resolves
        resolved = await wf_store.resolve_event_waits(
            publisher, event="order.paid", payload={"id": 1}, run_ids=["q"]
        )
        assert resolved == 1
    # run r suspends on its wait
    async with transaction(app.pool) as run_r:
        await _fence(run_r, "r", [])
        await wf_store.suspend_run(
            run_r,
            run_id="r",
            epoch=1,
            status="waiting",
            wake_at=INFINITY,
            step_count=1,
            blocking_keys=["w"],
        )
    step = await app.pool.fetchval(
        "SELECT status FROM ripple_steps WHERE run_id = 'r' AND key = 'w'"
    )
    parked_forever = await app.pool.fetchval(
        "SELECT available_at = 'infinity' FROM ripple_runs WHERE run_id = 'r'"
    )
    assert not (step == "completed" and parked_forever)
    assert step == "pending"  # still waiting for the next order.paid


async def _fence(conn: Any, run_id: str, entries: list[dict[str, Any]]) -> None:
    """Fence run `run_id` (epoch 1) and journal `entries`, as its worker would."""
    assert await wf_store.flush_run(
        conn, run_id=run_id, epoch=1, lease=30.0, step_count=1, entries=entries
    )


async def _wait_on(conn: Any, run_id: str, event: str) -> None:
    await wf_store.insert_wait(
        conn,
        run_id=run_id,
        step_key="w",
        step_seq=0,
        name="w",
        event=event,
        match=None,
        expires_at=None,
    )
