"""A NUL character (U+0000) anywhere in JSON headed for Postgres is refused
where it enters, with an error naming the problem and nothing written. Postgres `jsonb` (and
`text`) cannot hold U+0000, so a step output holding one used to fail at commit, again on every
recovery: the run crash-looped.

Covers step outputs, workflow outputs, error messages, run inputs, signal payloads, publish
payloads and queue messages, through the Python client and over REST (422).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from ripple.platform.client import Client
from ripple.platform.errors import InvalidInput
from ripple.subscribers import QueueTarget
from ripple.workflows import RetryPolicy, Worker, WorkflowContext, WorkflowFailed, workflow

NUL = "\x00"
#: The same character in a string, in a key, deep in a list.
BAD_VALUES: list[Any] = [
    {"s": f"a{NUL}b"},
    {f"k{NUL}": 1},
    [1, {"deep": [NUL]}],
    NUL,
]


@workflow(name="nul-step")
async def nul_step(ctx: WorkflowContext) -> str:
    return await ctx.step.run("nul", lambda: f"x{NUL}y", retry=RetryPolicy(max_attempts=1))


@workflow(name="nul-output")
async def nul_output(ctx: WorkflowContext) -> Any:
    return {"out": NUL}


@workflow(name="nul-error")
async def nul_error(ctx: WorkflowContext) -> None:
    raise RuntimeError(f"bad byte {NUL} here")


@workflow(name="echo")
async def echo(ctx: WorkflowContext, inp: Any) -> Any:
    return inp


async def _count(client: Client, table: str) -> int:
    return int(await client.pool.fetchval(f"SELECT count(*) FROM {table}"))


async def test_nul_in_step_output_fails_the_step_not_the_worker(client: Client) -> None:
    handles = [await client.start(wf) for wf in (nul_step, nul_output, nul_error)]
    async with Worker(client, [nul_step, nul_output, nul_error], webhooks=False, sweeper=False):
        errors = []
        for handle in handles:
            with pytest.raises(WorkflowFailed) as caught:
                await handle.result(timeout=20)
            errors.append(caught.value.error)
    step_error, output_error, raised = errors
    assert step_error["type"] == "InvalidInput"
    assert "U+0000" in step_error["message"]
    assert output_error["type"] == "InvalidInput"
    assert "U+0000" in output_error["message"]
    # an exception whose message holds NUL is stored, the character spelled out
    assert raised["type"] == "RuntimeError"
    assert raised["message"] == "bad byte \\x00 here"
    for handle in handles:
        run = await client.get_run(handle.run_id)
        assert run is not None
        assert run.status == "failed"
        assert run.attempt <= 1  # failed once, not recovered again and again
    (step,) = [s for s in await client.list_steps(handles[0].run_id) if s.key == "nul"]
    assert step.status == "failed"
    assert step.attempts == 1


@pytest.mark.parametrize("bad", BAD_VALUES)
async def test_nul_is_refused_where_json_enters(client: Client, bad: Any) -> None:
    await client.subscribe("nul.#", QueueTarget("nul-q"))
    run_id = (await client.start("never-served", {"ok": 1})).run_id
    calls = [
        ("input", client.start("never-served", bad)),
        ("input", client.start(echo, bad)),
        ("payload", client.signal(run_id, "go", bad)),
        ("payload", client.signal_matching("nul.event", bad)),
        ("payload", client.publish("nul.event", bad)),
        ("body", client.queues.send("nul-q", bad)),
    ]
    for field, call in calls:
        with pytest.raises(InvalidInput) as caught:
            await call
        assert isinstance(caught.value, ValueError)
        assert caught.value.field == field
        assert "U+0000" in caught.value.message
    assert await _count(client, "ripple_runs") == 1
    assert await _count(client, "ripple_signals") == 0
    assert await _count(client, "ripple_events") == 0
    assert await _count(client, "ripple_queue_messages") == 0


async def test_rest_answers_422_for_nul(client: Client, http: httpx.AsyncClient) -> None:
    await client.subscribe("nul.#", QueueTarget("nul-q"))
    run_id = (await client.start("never-served", {"ok": 1})).run_id
    bad = {"s": f"a{NUL}b"}
    posts = [
        ("/v1/workflows/never-served/runs", {"input": bad}),
        (f"/v1/runs/{run_id}/signals/go", bad),
        (f"/v1/workflows/never-served/runs/{run_id}/signals/go", bad),
        ("/v1/signals", {"event": "nul.event", "payload": bad}),
        ("/v1/topics/nul.event/events", {"payload": bad}),
        ("/v1/queues/nul-q/messages", {"body": bad}),
    ]
    for path, body in posts:
        response = await http.post(path, json=body)
        assert response.status_code == 422, (path, response.text)
        assert "U+0000" in response.text, (path, response.text)
    assert await _count(client, "ripple_runs") == 1
    assert await _count(client, "ripple_signals") == 0
    assert await _count(client, "ripple_events") == 0
    assert await _count(client, "ripple_queue_messages") == 0
    # the escaped text "\\u0000" (a backslash, then u0000) is ordinary and accepted
    ok = await http.post("/v1/topics/nul.event/events", json={"payload": {"s": "\\u0000"}})
    assert ok.status_code == 202, ok.text


@workflow(name="nul-step-name")
async def nul_step_name(ctx: WorkflowContext) -> str:
    return await ctx.step.run(f"a{NUL}b", lambda: "x")


async def test_nul_in_keys_and_names_is_refused_with_a_clear_error(client: Client) -> None:
    """Idempotency keys, signal names and step names are text columns: a NUL in one is refused
    before anything is written, naming the character (it used to surface as the driver's
    "invalid byte sequence" or "unsupported Unicode escape sequence")."""
    calls = [
        lambda: client.start(echo, {}, idempotency_key=f"k{NUL}"),
        lambda: client.publish("user.signup", {}, idempotency_key=f"k{NUL}"),
        lambda: client.workflows.signal_matching("evt", {}, idempotency_key=f"k{NUL}"),
        lambda: client.queues.send("q1", {}, group_id=f"g{NUL}"),
        lambda: client.queues.send("q1", {}, deduplication_id=f"d{NUL}"),
    ]
    for call in calls:
        with pytest.raises(InvalidInput, match=r"U\+0000"):
            await call()
    assert await _count(client, "ripple_runs") == 0
    assert await _count(client, "ripple_events") == 0
    assert await _count(client, "ripple_queue_messages") == 0
    run = await client.start(echo, {})
    with pytest.raises(InvalidInput, match=r"U\+0000"):
        await client.workflows.signal(run.run_id, f"go{NUL}", {})
    assert await _count(client, "ripple_signals") == 0

    handle = await client.start(nul_step_name)
    async with Worker(client, [nul_step_name], webhooks=False, sweeper=False):
        with pytest.raises(WorkflowFailed) as caught:
            await handle.result(timeout=20)
    assert caught.value.error["type"] == "InvalidInput"
    assert "U+0000" in caught.value.error["message"]
