"""The REST side of operating runs, in process over ASGI: retry, fork, bulk
actions, replay, backfillSince, and long-polls that say whether they timed out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from ripple.platform.api.app import create_app
from ripple.platform.client import Client
from ripple.workflows import NonRetriableError, Worker, WorkflowContext, WorkflowFailed, workflow

state = {"fail": True}


def _maybe_fail(value: int) -> int:
    if state["fail"]:
        raise NonRetriableError("not yet")
    return value + 1


@workflow(name="rest-flow")
async def rest_flow(ctx: WorkflowContext, inp: dict[str, Any]) -> int:
    first = await ctx.step.run("first", lambda: inp["n"])
    return int(await ctx.step.run("second", _maybe_fail, first))


@pytest.fixture
async def http(client: Client) -> AsyncIterator[httpx.AsyncClient]:
    state["fail"] = True
    transport = httpx.ASGITransport(app=create_app(client))
    async with httpx.AsyncClient(transport=transport, base_url="http://ripple") as http:
        yield http


def _problem(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    detail: str = response.json()["detail"]
    return detail


async def test_rest__start_wait_retry_and_fork(client: Client, http: httpx.AsyncClient) -> None:
    async with Worker(client, [rest_flow], webhooks=False, sweeper=False):
        started = await http.post(
            "/v1/workflows/rest-flow/runs", params={"wait": 10}, json={"input": {"n": 1}}
        )
        assert started.status_code == 201
        body = started.json()
        assert body["status"] == "failed"
        assert body["timedOut"] is False
        assert body["error"]["message"] == "not yet"
        run_id = body["runId"]

        state["fail"] = False
        retried = await http.post(f"/v1/runs/{run_id}/retry")
        assert retried.status_code == 200
        waited = await http.get(f"/v1/runs/{run_id}", params={"wait": 10})
        assert waited.json()["status"] == "completed"
        assert waited.json()["output"] == 2
        assert waited.json()["timedOut"] is False
        assert "is completed" in _problem(await http.post(f"/v1/runs/{run_id}/retry"), 409)

        fork = await http.post(
            f"/v1/runs/{run_id}/fork", json={"fromStep": "second", "input": {"n": 5}}
        )
        assert fork.status_code == 201
        assert fork.json()["forkedFrom"] == run_id
        forked = await http.get(f"/v1/runs/{fork.json()['runId']}", params={"wait": 10})
        assert forked.json()["output"] == 2  # "first" was copied: the new input is not read
        detail = _problem(await http.post(f"/v1/runs/{run_id}/fork", json={"fromStep": "x"}), 422)
        assert "not in the journal" in detail
    _problem(await http.post("/v1/runs/nope/retry"), 404)
    _problem(await http.post("/v1/runs/nope/fork", json={"fromStep": "a"}), 404)


async def test_rest__long_poll_times_out_on_a_run_that_does_not_end(
    client: Client, http: httpx.AsyncClient
) -> None:
    handle = await client.start("rest-flow", {"n": 1})  # no worker: stays pending
    waited = await http.get(f"/v1/runs/{handle.run_id}", params={"wait": 0.3})
    assert waited.status_code == 200
    assert waited.json()["status"] == "pending"
    assert waited.json()["timedOut"] is True
    started = await http.post(
        "/v1/workflows/rest-flow/runs", params={"wait": 0.2}, json={"input": {"n": 2}}
    )
    assert started.json()["timedOut"] is True
    _problem(await http.get("/v1/runs/nope", params={"wait": 1}), 404)
    _problem(await http.get(f"/v1/runs/{handle.run_id}", params={"wait": 61}), 422)


async def test_rest__bulk_actions_count_and_filter(client: Client, http: httpx.AsyncClient) -> None:
    for n in range(3):
        await client.start("rest-flow", {"n": n})
    dry = await http.post("/v1/runs/cancel", json={"workflow": "rest-flow", "dryRun": True})
    assert dry.json() == {"count": 3, "dryRun": True}
    none = await http.post("/v1/runs/cancel", json={"workflow": "other"})
    assert none.json()["count"] == 0
    canceled = await http.post("/v1/runs/cancel", json={"workflow": "rest-flow"})
    assert canceled.json()["count"] == 3
    retried = await http.post("/v1/runs/retry", json={"status": "canceled"})
    assert retried.json()["count"] == 3
    # The schema of each bulk body lists the statuses its action acts on.
    refused = await http.post("/v1/runs/retry", json={"status": "waiting"})
    assert refused.status_code == 422, refused.text
    assert [e["loc"] for e in refused.json()["errors"]] == [["body", "status"]]


async def test_rest__backfill_and_replay(client: Client, http: httpx.AsyncClient) -> None:
    t0 = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    for n in range(3):
        await client.publish("order.created", {"n": n})
    created = await http.post(
        "/v1/subscriptions",
        json={"pattern": "order.*", "target": {"type": "queue", "queue": "q"}, "backfillSince": t0},
    )
    assert created.status_code == 201
    sub = created.json()
    assert sub["backfillDelivered"] == 3
    assert sub["backfillDoneAt"] is not None
    replayed = await http.post(f"/v1/subscriptions/{sub['id']}/replay", json={"since": t0})
    assert replayed.json() == {"replayed": 3}
    old = (datetime.now(UTC) - timedelta(days=8)).isoformat()
    detail = _problem(
        await http.post(f"/v1/subscriptions/{sub['id']}/replay", json={"since": old}), 422
    )
    assert "retained for 7 days" in detail
    too_old = await http.post(
        "/v1/subscriptions",
        json={"pattern": "x.*", "target": {"type": "queue", "queue": "q"}, "backfillSince": old},
    )
    _problem(too_old, 422)
    assert len((await http.get("/v1/subscriptions")).json()) == 1
    missing = "0193c2a4-0000-7000-8000-000000000000"
    _problem(await http.post(f"/v1/subscriptions/{missing}/replay", json={"since": t0}), 404)


async def test_rest__start_answers_pending_and_a_repeated_key_the_first_runs_status(
    client: Client, http: httpx.AsyncClient
) -> None:
    """A start without a key answers `pending` without reading the run back; a start whose
    idempotency key names an earlier run answers that run's current status."""
    fresh = await http.post("/v1/workflows/rest-flow/runs", json={"input": {"n": 1}})
    assert fresh.status_code == 201
    assert fresh.json()["status"] == "pending"
    keyed = {"input": {"n": 1}, "idempotencyKey": "once"}
    async with Worker(client, [rest_flow], webhooks=False, sweeper=False):
        first = await http.post("/v1/workflows/rest-flow/runs", json=keyed)
        run_id = first.json()["runId"]
        with pytest.raises(WorkflowFailed):
            await client.handle(run_id).result(timeout=10)
    again = await http.post("/v1/workflows/rest-flow/runs", json=keyed)
    assert again.status_code == 201
    assert (again.json()["runId"], again.json()["status"]) == (run_id, "failed")
