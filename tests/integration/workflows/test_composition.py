"""Composition inside a workflow: race, join, durable loops with bounded history, and code
changes under in-flight runs (removed, patched)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ripple.workflows import (
    Break,
    Continue,
    JoinError,
    WorkflowContext,
    WorkflowFailed,
    workflow,
)
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App

calls: dict[str, int] = {}


def bump(name: str) -> int:
    calls[name] = calls.get(name, 0) + 1
    return calls[name]


async def _status(app: App, run_id: str) -> str | None:
    run = await app.workflows.get_run(run_id)
    return None if run is None else run.status


async def _journal(app: App, run_id: str) -> dict[str, str]:
    rows = await app.pool.fetch("SELECT key, status FROM ripple_steps WHERE run_id = $1", run_id)
    return {row["key"]: row["status"] for row in rows}


@workflow(name="approval-race")
async def approval_race(ctx: WorkflowContext, timeout: float) -> dict[str, Any]:
    """Reply or timeout; after a timeout it waits for "finish" (so a late reply can be sent
    while the run is still active)."""
    winner, value = await ctx.step.race(
        "reply-or-timeout",
        {
            "reply": lambda: ctx.step.wait_for_event("reply", match={"ticket": 1}),
            "timeout": lambda: ctx.step.sleep("give-up", timeout),
        },
    )
    done = await ctx.step.run("after", lambda: bump("after"))
    if winner == "timeout":
        await ctx.step.wait_for_event("finish")
    return {"winner": winner, "value": value, "after": done}


async def test_race__the_event_wins(app: App) -> None:
    calls.clear()
    handle = await app.workflows.start(approval_race, 30.0)
    async with app.worker(approval_race):
        await assert_eventually(lambda: _status_is(app, handle.run_id, "waiting"))
        result = await app.workflows.signal(handle.run_id, "reply", {"ticket": 1, "ok": True})
        assert result.delivered
        out = await handle.result(timeout=10)
    assert out == {"winner": "reply", "value": {"ticket": 1, "ok": True}, "after": 1}
    journal = await _journal(app, handle.run_id)
    assert journal["reply-or-timeout"] == "completed"
    assert journal["reply-or-timeout/reply/reply"] == "completed"
    assert journal["reply-or-timeout/timeout/give-up"] == "pending"  # dropped, never fired


async def test_race__the_timer_wins_and_a_later_signal_is_not_delivered(app: App) -> None:
    calls.clear()
    handle = await app.workflows.start(approval_race, 0.3)
    async with app.worker(approval_race):
        await assert_eventually(lambda: _journal_has(app, handle.run_id, "finish"))
        # Only the "finish" wait is left: the losing branch's wait was dropped with the race.
        waits = await app.pool.fetch("SELECT name FROM ripple_waits")
        assert [w["name"] for w in waits] == ["finish"]
        late = await app.workflows.signal(handle.run_id, "reply", {"ticket": 1})
        assert not late.delivered  # kept in the inbox; no branch waits for it any more
        await app.workflows.signal(handle.run_id, "finish", {})
        out = await handle.result(timeout=10)
    assert out == {"winner": "timeout", "value": None, "after": 1}


@workflow(name="approver")
async def approver(ctx: WorkflowContext) -> str:
    await ctx.step.wait_for_event("approve")
    return "approved"


@workflow(name="child-race")
async def child_race(ctx: WorkflowContext) -> list[Any]:
    winner, value = await ctx.step.race(
        "child-or-timer",
        {
            "child": lambda: ctx.step.run_workflow(approver, name="ask"),
            "timer": lambda: ctx.step.sleep("deadline", 0.3),
        },
    )
    return [winner, value]


async def test_race__a_losing_child_run_is_canceled(app: App) -> None:
    handle = await app.workflows.start(child_race)
    async with app.worker(child_race, approver):
        assert await handle.result(timeout=10) == ["timer", None]
        children = await app.workflows.list_runs(parent_run_id=handle.run_id)
    assert [(c.workflow, c.status) for c in children.items] == [("approver", "canceled")]


@workflow(name="replayed-race")
async def replayed_race(ctx: WorkflowContext) -> list[Any]:
    winner, value = await ctx.step.race(
        "pick",
        {
            "slow": lambda: ctx.step.run("slow", _slow_branch),
            "fast": lambda: ctx.step.run("fast", lambda: "fast"),
        },
    )
    await ctx.step.wait_for_event("continue")
    return [winner, value]


async def _slow_branch() -> str:
    bump("slow")
    await asyncio.sleep(0.2)
    return "slow"


async def test_race__the_journaled_winner_is_replayed(app: App) -> None:
    calls.clear()
    handle = await app.workflows.start(replayed_race)
    async with app.worker(replayed_race):
        await assert_eventually(lambda: _status_is(app, handle.run_id, "waiting"))
    # On resume the slow branch would now finish at once too: the recorded winner stands, and
    # no branch runs again.
    await app.workflows.signal(handle.run_id, "continue", {})
    async with app.worker(replayed_race):
        assert await handle.result(timeout=10) == ["fast", "fast"]
    assert calls == {"slow": 1}


@workflow(name="lookups")
async def lookups(ctx: WorkflowContext, fail: bool) -> dict[str, Any]:
    async def posts() -> list[int]:
        await ctx.step.sleep("cool-down", 0.01)
        return list(await ctx.step.run("fetch", lambda: [1, 2]))

    def broken() -> str:
        raise ValueError("profile service down")

    try:
        return await ctx.step.join(
            "fetch",
            {
                "user": lambda: ctx.step.run("fetch", lambda: {"id": 7}),
                "posts": posts,
                "profile": lambda: ctx.step.run(
                    "fetch", broken if fail else (lambda: "ok"), retry=_no_retry()
                ),
            },
        )
    except JoinError as exc:
        return {"failed": sorted(exc.failures), "type": exc.failures["profile"]["type"]}


def _no_retry() -> Any:
    from ripple.workflows import RetryPolicy

    return RetryPolicy(max_attempts=1)


async def test_join__all_branches_and_their_results(app: App) -> None:
    handle = await app.workflows.start(lookups, False)
    async with app.worker(lookups):
        out = await handle.result(timeout=10)
    assert out == {"user": {"id": 7}, "posts": [1, 2], "profile": "ok"}
    journal = await _journal(app, handle.run_id)
    assert {"fetch/user/fetch", "fetch/posts/fetch", "fetch/profile/fetch"} <= set(journal)


async def test_join__one_failing_branch_lets_the_others_finish_then_raises(app: App) -> None:
    handle = await app.workflows.start(lookups, True)
    async with app.worker(lookups):
        out = await handle.result(timeout=10)
    assert out == {"failed": ["profile"], "type": "ValueError"}
    journal = await _journal(app, handle.run_id)
    assert journal["fetch/posts/fetch"] == "completed"  # finished although a sibling failed
    assert journal["fetch"] == "failed"


@workflow(name="counter")
async def counter(ctx: WorkflowContext, n: int) -> dict[str, Any]:
    async def body(ctx: WorkflowContext, state: dict[str, int]) -> Continue | Break:
        i = state["i"]
        if i == n:
            return Break({"sum": state["sum"]})
        rows = await ctx.step.run("count", _journal_rows, ctx.run_id)
        return Continue({"i": i + 1, "sum": state["sum"] + i, "most": max(state["most"], rows)})

    out = await ctx.step.loop("drain", body, state={"i": 0, "sum": 0, "most": 0}, keep=10)
    final = await ctx.step.run("done", lambda: "done")
    return {"loop": out, "final": final}


_pool_for_steps: list[Any] = []
most_rows: list[int] = []


async def _journal_rows(run_id: str) -> int:
    bump("count")
    rows = int(
        await _pool_for_steps[0].fetchval(
            "SELECT count(*) FROM ripple_steps WHERE run_id = $1", run_id
        )
    )
    most_rows.append(rows)
    return rows


async def test_loop__a_long_loop_keeps_a_bounded_journal(app: App) -> None:
    calls.clear()
    most_rows.clear()
    _pool_for_steps[:] = [app.pool]
    handle = await app.workflows.start(counter, 400)
    async with app.worker(counter):
        out = await handle.result(timeout=60)
    assert out == {"loop": {"sum": sum(range(400))}, "final": "done"}
    assert calls["count"] == 400
    assert max(most_rows) < 20  # keep=10 iterations of one step, plus the loop and its state
    assert (
        await app.pool.fetchval(
            "SELECT count(*) FROM ripple_steps WHERE run_id = $1", handle.run_id
        )
        < 20
    )


@workflow(name="resumable-loop")
async def resumable_loop(ctx: WorkflowContext) -> int:
    async def body(ctx: WorkflowContext, i: int) -> Continue | Break:
        if i == 60:
            return Break(i)
        await ctx.step.run("tick", lambda: bump(f"tick-{i}"))
        if i == 40:
            await ctx.step.wait_for_event("resume")  # the run parks mid-loop
        return Continue(i + 1)

    return int(await ctx.step.loop("ticks", body, state=0, keep=5))


async def test_loop__a_resume_continues_from_the_last_recorded_iteration(app: App) -> None:
    calls.clear()
    handle = await app.workflows.start(resumable_loop)
    async with app.worker(resumable_loop):
        await assert_eventually(lambda: _status_is(app, handle.run_id, "waiting"))
    journal = await _journal(app, handle.run_id)
    assert not any(key.startswith("ticks/~0/") for key in journal)  # trimmed long ago
    await app.workflows.signal(handle.run_id, "resume", {})
    async with app.worker(resumable_loop):
        assert await handle.result(timeout=10) == 60
    # No iteration ran twice: the resume started at iteration 40 from its recorded state.
    assert set(calls.values()) == {1}
    assert len(calls) == 60


@workflow(name="first-iteration-parks")
async def first_iteration_parks(ctx: WorkflowContext) -> int:
    async def body(ctx: WorkflowContext, i: int) -> Continue | Break:
        await ctx.step.run("tick", lambda: bump(f"tick-{i}"))
        if i == 0:
            await ctx.step.wait_for_event("resume")
        return Continue(i + 1) if i < 2 else Break(i)

    return int(await ctx.step.loop("ticks", body, state=0))


async def test_loop__a_run_parked_in_the_first_iteration_resumes_in_the_loop(app: App) -> None:
    calls.clear()
    handle = await app.workflows.start(first_iteration_parks)
    async with app.worker(first_iteration_parks):
        await assert_eventually(lambda: _status_is(app, handle.run_id, "waiting"))
        await app.workflows.signal(handle.run_id, "resume", {})
        assert await handle.result(timeout=10) == 2
    assert calls == {"tick-0": 1, "tick-1": 1, "tick-2": 1}


async def test_loop__bad_keep_and_bad_body_results_fail_clearly(app: App) -> None:
    @workflow(name="bad-loop")
    async def bad_loop(ctx: WorkflowContext) -> None:
        async def body(ctx: WorkflowContext, state: Any) -> Any:
            return "neither"

        await ctx.step.loop("l", body, state=None)

    handle = await app.workflows.start(bad_loop)
    async with app.worker(bad_loop):
        with pytest.raises(WorkflowFailed) as info:
            await handle.result(timeout=10)
    assert "Continue(state) or Break(value)" in info.value.error["message"]


# -- code changes under in-flight runs ---------------------------------------------------------


def _old_code() -> Any:
    @workflow(name="evolving")
    async def evolving(ctx: WorkflowContext) -> list[Any]:
        await ctx.step.run("a", lambda: bump("a"))
        await ctx.step.run("old", lambda: bump("old"))
        await ctx.step.wait_for_event("go")
        return ["old code"]

    return evolving


def _new_code() -> Any:
    @workflow(name="evolving")
    async def evolving(ctx: WorkflowContext) -> list[Any]:
        await ctx.step.run("a", lambda: bump("a"))
        ctx.step.removed("old")
        extra = ctx.patched("add-extra")
        if extra:
            await ctx.step.run("extra", lambda: bump("extra"))
        await ctx.step.wait_for_event("go")
        return ["new code", extra]

    return evolving


async def test_removed_and_patched__in_flight_runs_finish_on_new_code(app: App) -> None:
    calls.clear()
    old, new = _old_code(), _new_code()
    in_flight = await app.workflows.start(old)
    async with app.worker(old):
        await assert_eventually(lambda: _status_is(app, in_flight.run_id, "waiting"))
    fresh = await app.workflows.start(new)
    await app.workflows.signal(in_flight.run_id, "go", {})
    async with app.worker(new):
        # The in-flight run had passed "add-extra" on the old code: patched() is False there.
        assert await in_flight.result(timeout=10) == ["new code", False]
        await assert_eventually(lambda: _status_is(app, fresh.run_id, "waiting"))
        await app.workflows.signal(fresh.run_id, "go", {})
        assert await fresh.result(timeout=10) == ["new code", True]
    assert calls == {"a": 2, "old": 1, "extra": 1}
    assert "$patch:add-extra" in await _journal(app, fresh.run_id)


async def _journal_has(app: App, run_id: str, key: str) -> bool:
    return key in await _journal(app, run_id)


async def _status_is(app: App, run_id: str, status: str) -> bool:
    return await _status(app, run_id) == status
