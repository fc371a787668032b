"""Skipping time: `Environment.fire_timers` and the operator's `client.wake` /
`POST /v1/runs/{runId}/wake` fire pending sleeps and wait timeouts now, journaled as fired
early, audited as `run.wake`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from ripple.platform.errors import NotFound
from ripple.testing import Environment
from ripple.workflows import WorkflowContext, workflow
from tests.helpers import rest_client

pytestmark = pytest.mark.timeout(120)


@workflow(name="nap")
async def nap(ctx: WorkflowContext) -> str:
    await ctx.step.sleep("day", timedelta(days=1))
    await ctx.step.sleep_until("new-year", datetime(2999, 1, 1, tzinfo=UTC))
    return "rested"


@workflow(name="approval")
async def approval(ctx: WorkflowContext) -> Any:
    return await ctx.step.wait_for_event("ok", timeout=timedelta(days=3))


@workflow(name="deadline")
async def deadline(ctx: WorkflowContext) -> Any:
    return await ctx.step.race(
        "answer-or-deadline",
        {
            "answer": lambda: ctx.step.wait_for_event("answer"),
            "deadline": lambda: ctx.step.sleep("week", timedelta(days=7)),
        },
    )


async def test_fire_timers__sleep_and_sleep_until_fire_now(pg_admin_url: str) -> None:
    async with Environment([nap], database_url=pg_admin_url) as env:
        handle = await env.client.start(nap, None)
        assert await env.fire_timers(handle.run_id) == 1  # the day-long sleep
        assert await env.fire_timers() == 1  # sleep_until a date centuries away
        assert await handle.result(timeout=10) == "rested"
        steps = {s.key: s for s in await env.client.list_steps(handle.run_id)}
        assert steps["day"].output["firedEarly"] is True
        assert steps["new-year"].output["firedEarly"] is True
        assert await env.fire_timers(handle.run_id) == 0  # nothing left to fire


async def test_fire_timers__a_wait_times_out_now(pg_admin_url: str) -> None:
    async with Environment([approval], database_url=pg_admin_url) as env:
        handle = await env.client.start(approval, None)
        assert await env.fire_timers(handle.run_id) == 1
        assert await handle.result(timeout=10) is None  # what a timed-out wait returns


async def test_fire_timers__the_timer_wins_a_race_against_a_wait(pg_admin_url: str) -> None:
    async with Environment([deadline], database_url=pg_admin_url) as env:
        handle = await env.client.start(deadline, None)
        assert await env.fire_timers(handle.run_id) == 1
        assert await handle.result(timeout=10) == ["deadline", None]
        # and a signal before the timer fires wins instead
        other = await env.client.start(deadline, None)
        await env.settle(other.run_id)
        await env.client.signal(other.run_id, "answer", {"yes": True})
        assert await other.result(timeout=10) == ["answer", {"yes": True}]


async def test_wake__rest_route_skips_the_sleep_and_records_an_audit_row(
    pg_admin_url: str,
) -> None:
    async with Environment([nap], database_url=pg_admin_url) as env:
        handle = await env.client.start(nap, None)
        await env.settle(handle.run_id)
        async with rest_client(env.client) as http:
            woke = await http.post(f"/v1/runs/{handle.run_id}/wake", json={"step": "nope"})
            assert woke.json() == {"runId": handle.run_id, "woken": False}
            woke = await http.post(f"/v1/runs/{handle.run_id}/wake")
            assert woke.status_code == 200
            assert woke.json() == {"runId": handle.run_id, "woken": True}
            missing = await http.post("/v1/runs/no-such-run/wake")
            assert missing.status_code == 404
            assert missing.headers["content-type"].startswith("application/problem+json")
        with pytest.raises(NotFound):
            await env.client.wake("no-such-run")
        conn = await asyncpg.connect(env.database_url)
        try:
            rows = await conn.fetch("SELECT action, target, actor FROM ripple_audit")
        finally:
            await conn.close()
        assert [(r["action"], r["target"]) for r in rows] == [("run.wake", handle.run_id)]
