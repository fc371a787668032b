"""A NUL character (U+0000) in an idempotency key, a step or branch name, a patch id, a signal
name or a queue name is refused where it enters (`InvalidInput`; REST 422/400 problem+json)
with nothing written: these are Postgres text columns, which cannot hold it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from ripple.platform.client import Client
from ripple.platform.errors import InvalidInput
from ripple.subscribers import QueueTarget
from ripple.workflows import Worker, WorkflowContext, WorkflowFailed, workflow

NUL = "\x00"


async def _noop() -> str:
    return "x"


@workflow(name="nul-race-branch")
async def nul_race_branch(ctx: WorkflowContext) -> Any:
    return await ctx.step.race("r", {f"a{NUL}": _noop})


@workflow(name="nul-join-branch")
async def nul_join_branch(ctx: WorkflowContext) -> Any:
    return await ctx.step.join("j", {f"b{NUL}": _noop})


@workflow(name="nul-race-name")
async def nul_race_name(ctx: WorkflowContext) -> Any:
    return await ctx.step.race(f"r{NUL}", {"a": _noop})


@workflow(name="nul-patch")
async def nul_patch(ctx: WorkflowContext) -> bool:
    return ctx.patched(f"p{NUL}")


@workflow(name="nul-wait")
async def nul_wait(ctx: WorkflowContext) -> Any:
    return await ctx.step.wait_for_event(f"w{NUL}", timeout=1)


@workflow(name="nul-child")
async def nul_child(ctx: WorkflowContext) -> Any:
    return await ctx.step.run_workflow("never-served", name=f"c{NUL}")


@workflow(name="idle")
async def idle(ctx: WorkflowContext) -> None:
    return None


async def _count(client: Client, table: str) -> int:
    return int(await client.pool.fetchval(f"SELECT count(*) FROM {table}"))


NAMED_IN_A_RUN = [nul_race_branch, nul_join_branch, nul_race_name, nul_patch, nul_wait, nul_child]


async def test_nul_in_step_branch_and_patch_names_fails_the_run_naming_it(client: Client) -> None:
    handles = {wf.name: await client.start(wf) for wf in NAMED_IN_A_RUN}
    async with Worker(client, NAMED_IN_A_RUN, webhooks=False, sweeper=False):
        for name, handle in handles.items():
            with pytest.raises(WorkflowFailed) as caught:
                await handle.result(timeout=20)
            error = caught.value.error
            assert error["type"] == "InvalidInput", (name, error)
            assert "U+0000" in error["message"], (name, error)
            assert "cannot be converted" not in error["message"], (name, error)
    # nothing was journaled under a mangled key, and no child run started
    assert await _count(client, "ripple_runs") == len(NAMED_IN_A_RUN)


async def test_nul_in_keys_and_names_is_refused_in_python(client: Client) -> None:
    run = await client.start("never-served")
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: client.signal(run.run_id, "go", {}, idempotency_key=f"k{NUL}"),
        lambda: client.signal(run.run_id, f"g{NUL}o", {}),
        lambda: client.signal_matching(f"e{NUL}", {}),
        lambda: client.start(idle, idempotency_key=f"k{NUL}"),
        lambda: client.queues.send(f"q{NUL}", {}),
        lambda: client.queues.receive(f"q{NUL}", wait=0),
        lambda: client.subscribe("nul.#", QueueTarget(f"q{NUL}")),
    ]
    for call in calls:
        with pytest.raises(InvalidInput, match=r"U\+0000|invalid"):
            await call()
    assert await _count(client, "ripple_runs") == 1
    assert await _count(client, "ripple_signals") == 0
    assert await _count(client, "ripple_subscriptions") == 0
    assert await _count(client, "ripple_queue_messages") == 0


async def test_nul_in_keys_and_names_is_refused_over_rest(
    client: Client, http: httpx.AsyncClient
) -> None:
    run_id = (await client.start("never-served")).run_id
    requests = [
        ("POST", "/v1/workflows/idle/runs", {"input": None, "idempotencyKey": f"k{NUL}"}, None),
        ("POST", "/v1/topics/nul.event/events", {"payload": {}, "idempotencyKey": f"k{NUL}"}, None),
        (
            "POST",
            "/v1/signals",
            {"event": "nul.event", "payload": {}, "idempotencyKey": f"k{NUL}"},
            None,
        ),
        ("POST", f"/v1/runs/{run_id}/signals/go%00", {}, None),
        ("POST", f"/v1/runs/{run_id}/signals/go?idempotencyKey=k%00", {}, None),
        ("POST", "/v1/queues/q%00/messages", {"body": {}}, None),
        ("GET", "/v1/queues/q%00/stats", None, None),
        (
            "POST",
            "/v1/subscriptions",
            {"pattern": "nul.#", "target": {"type": "queue", "queue": f"q{NUL}"}},
            None,
        ),
    ]
    for method, path, body, headers in requests:
        response = await http.request(method, path, json=body, headers=headers)
        assert response.status_code in (400, 422), (path, response.status_code, response.text)
        assert response.headers["content-type"].startswith("application/problem+json"), (
            path,
            response.text,
        )
    assert await _count(client, "ripple_runs") == 1
    assert await _count(client, "ripple_signals") == 0
    assert await _count(client, "ripple_events") == 0
    assert await _count(client, "ripple_subscriptions") == 0
    assert await _count(client, "ripple_queue_messages") == 0
