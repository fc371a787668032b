"""Bulk cancel and retry over 1,000 runs while a worker runs them: every matching
run is acted on exactly once and no other run is touched."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ripple.platform.client import Client
from ripple.platform.core.db import transaction
from ripple.platform.errors import InvalidInput
from ripple.workflows import NonRetriableError, Worker, WorkflowContext, workflow
from ripple.workflows.runs.starts import RunRequest
from tests.helpers import assert_eventually

pytestmark = pytest.mark.timeout(180)  # 2,200 runs through one worker on a shared machine

N = 1000
OTHERS = 100
fixed = {"flaky": False}


@workflow(name="hold")
async def hold(ctx: WorkflowContext, inp: dict[str, Any]) -> Any:
    await ctx.step.run("prepare", lambda: inp["i"])
    return await ctx.step.wait_for_event("go", event="go.now", match={"i": inp["i"]})


@workflow(name="keep")
async def keep(ctx: WorkflowContext, inp: dict[str, Any]) -> Any:
    return await ctx.step.wait_for_event("go", event="go.later", match={"i": inp["i"]})


def _flaky(i: int) -> int:
    if not fixed["flaky"]:
        raise NonRetriableError(f"bug in handling {i}")
    return i * 2


@workflow(name="flaky")
async def flaky(ctx: WorkflowContext, inp: dict[str, Any]) -> int:
    first = await ctx.step.run("first", lambda: inp["i"])
    return int(await ctx.step.run("second", _flaky, first))


@workflow(name="broken")
async def broken(ctx: WorkflowContext, inp: dict[str, Any]) -> None:
    await ctx.step.run("only", _raise)


def _raise() -> None:
    raise NonRetriableError("always")


async def _create(client: Client, workflow: str, count: int, tag: str) -> None:
    requests = [RunRequest(workflow, {"i": i}, f"{tag}-{i}") for i in range(count)]
    async with transaction(client.pool) as conn:
        assert await client.workflows.create_runs(conn, requests) == count
    client.workflows.notify_runs_ready()


async def _statuses(client: Client, workflow: str) -> dict[str, int]:
    rows = await client.pool.fetch(
        "SELECT status, count(*) AS n FROM ripple_runs WHERE workflow = $1 GROUP BY status",
        workflow,
    )
    return {r["status"]: r["n"] for r in rows}


@pytest.fixture(autouse=True)
def _reset() -> None:
    fixed["flaky"] = False


async def test_cancel_many__1000_runs_while_a_worker_runs_them(client: Client) -> None:
    async with Worker(client, [hold, keep], concurrency=100, webhooks=False, sweeper=False):
        await _create(client, "keep", OTHERS, "keep")

        async def others_waiting() -> bool:
            return await _statuses(client, "keep") == {"waiting": OTHERS}

        await assert_eventually(others_waiting, timeout=60)
        keep_before = await client.pool.fetch(
            "SELECT run_id, epoch, updated_at FROM ripple_runs WHERE workflow = 'keep'"
        )
        # The worker is claiming and suspending these while they are canceled.
        await _create(client, "hold", N, "hold")
        count = await client.cancel_many(workflow="hold")
        assert count == N
        assert await _statuses(client, "hold") == {"canceled": N}

        async def settled() -> bool:  # the worker stopped executing every canceled run
            waits = await client.pool.fetchval(
                "SELECT count(*) FROM ripple_waits w JOIN ripple_runs r USING (run_id) "
                "WHERE r.workflow = 'hold'"
            )
            return bool(waits == 0)

        await assert_eventually(settled, timeout=30)
        assert await _statuses(client, "hold") == {"canceled": N}
        # each canceled once, with its own message
        errors = await client.pool.fetch(
            "SELECT run_id, error FROM ripple_runs WHERE workflow = 'hold'"
        )
        assert all(r["error"]["message"] == f"run {r['run_id']} was canceled" for r in errors)
        keep_after = await client.pool.fetch(
            "SELECT run_id, epoch, updated_at FROM ripple_runs WHERE workflow = 'keep'"
        )
        assert sorted(map(tuple, keep_after)) == sorted(map(tuple, keep_before))
        assert await client.cancel_many(workflow="hold") == 0  # nothing left to match


async def test_retry_many__1000_failed_runs_while_a_worker_runs(client: Client) -> None:
    async with Worker(client, [flaky, broken], concurrency=100, webhooks=False, sweeper=False):
        await _create(client, "flaky", N, "flaky")
        await _create(client, "broken", OTHERS, "broken")

        async def all_failed() -> bool:
            return await _statuses(client, "flaky") == {"failed": N} and await _statuses(
                client, "broken"
            ) == {"failed": OTHERS}

        await assert_eventually(all_failed, timeout=90)
        broken_before = await client.pool.fetch(
            "SELECT run_id, attempt, epoch, updated_at FROM ripple_runs WHERE workflow = 'broken'"
        )
        assert await client.retry_many(workflow="flaky", dry_run=True) == N
        fixed["flaky"] = True
        # The worker claims retried runs while later batches are still being retried.
        assert await client.retry_many(workflow="flaky", status="failed") == N

        async def all_completed() -> bool:
            return await _statuses(client, "flaky") == {"completed": N}

        await assert_eventually(all_completed, timeout=90)
    attempts = await client.pool.fetch(
        "SELECT attempt, count(*) AS n FROM ripple_runs WHERE workflow = 'flaky' GROUP BY 1"
    )
    assert [(r["attempt"], r["n"]) for r in attempts] == [(2, N)]  # retried exactly once
    outputs = await client.pool.fetch(
        "SELECT input, output FROM ripple_runs WHERE workflow = 'flaky'"
    )
    assert all(r["output"] == r["input"]["i"] * 2 for r in outputs)
    broken_after = await client.pool.fetch(
        "SELECT run_id, attempt, epoch, updated_at FROM ripple_runs WHERE workflow = 'broken'"
    )
    assert sorted(map(tuple, broken_after)) == sorted(map(tuple, broken_before))


async def test_bulk__bad_filters_and_filters_matching_nothing(client: Client) -> None:
    await _create(client, "flaky", 3, "pending")  # no worker: they stay pending
    with pytest.raises(InvalidInput, match="retry_many acts on runs that are failed, canceled"):
        await client.retry_many(status="pending")
    with pytest.raises(InvalidInput, match="cancel_many acts on runs that are pending"):
        await client.cancel_many(status="completed")
    assert await client.cancel_many(workflow="no-such-workflow") == 0
    assert await client.retry_many(workflow="flaky") == 0
    old = datetime.now(UTC) - timedelta(days=1)
    assert await client.cancel_many(workflow="flaky", created_before=old) == 0
    assert await _statuses(client, "flaky") == {"pending": 3}
    assert await client.cancel_many(workflow="flaky", status="pending") == 3
