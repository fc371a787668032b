"""`ripple` operator actions on the database (`ClientOperator`) answer what their REST routes
answer for the same state, so `--json` prints the same with or without `--api`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ripple.platform.api.app import create_app
from ripple.platform.cli.direct import ClientOperator
from ripple.platform.client import Client
from ripple.platform.errors import InvalidInput, NotFound
from ripple.subscribers import QueueTarget


@pytest.fixture
async def http(client: Client) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(client))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        yield http


async def _get(http: httpx.AsyncClient, path: str, **params: Any) -> Any:
    response = await http.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


async def test_cli_direct__reads_answer_the_routes_json(
    client: Client, http: httpx.AsyncClient
) -> None:
    run_id = (await client.start("cli-same", {"n": 1}, idempotency_key="same-1")).run_id
    await client.subscribe("same.*", QueueTarget("same-q"), {"kind": "a"})
    await client.publish("same.one", {"kind": "a"})
    await client.schedules.create("same-tick", topic="same.tick", every=3600, payload={"n": 2})
    direct = ClientOperator(client)
    pairs: list[tuple[Any, str, dict[str, Any]]] = [
        (await direct.list_runs(None, "pending", 20, None), "/v1/runs", {"status": "pending"}),
        (await direct.get_run(run_id), f"/v1/runs/{run_id}", {}),
        (await direct.steps(run_id), f"/v1/runs/{run_id}/steps", {}),
        (await direct.subscriptions(), "/v1/subscriptions", {}),
        (
            await direct.explain("same.two", {"kind": "b"}),
            "/v1/topics/same.two/explain",
            {"payload": json.dumps({"kind": "b"})},
        ),
        (await direct.queue_dead_letters("same-q", 50), "/v1/queues/same-q/dead-letters", {}),
        (await direct.deliveries(None, 20, None), "/v1/deliveries", {"limit": 20}),
        (await direct.schedules(), "/v1/schedules", {}),
    ]
    for answer, path, params in pairs:
        assert answer == await _get(http, path, **params), path
    # The oldest message ages between the two reads; everything else is the same.
    stats = await direct.queue_stats("same-q")
    rest = await _get(http, "/v1/queues/same-q/stats")
    assert stats.pop("oldestAge") <= rest.pop("oldestAge")
    assert stats == rest


async def test_cli_direct__writes_answer_the_routes_shapes(
    client: Client, http: httpx.AsyncClient
) -> None:
    direct = ClientOperator(client)
    published = await direct.publish("same.one", {"n": 1}, "publish-1")
    repeat = await http.post(
        "/v1/topics/same.one/events", json={"payload": {"n": 1}, "idempotencyKey": "publish-1"}
    )
    assert repeat.json() == {**published, "deliveries": 0, "duplicate": True}

    started = await direct.start("cli-same", {"n": 2}, "start-1")
    again = await http.post(
        "/v1/workflows/cli-same/runs", json={"input": {"n": 2}, "idempotencyKey": "start-1"}
    )
    assert again.json() == started

    signaled = await direct.signal(started["runId"], "go", {"n": 3}, "signal-1")
    resent = await http.post(
        f"/v1/runs/{started['runId']}/signals/go",
        json={"n": 3},
        headers={"Idempotency-Key": "signal-1"},
    )
    assert resent.json() == signaled


async def test_cli_direct__a_missing_run_fails_with_the_routes_message(
    client: Client, http: httpx.AsyncClient
) -> None:
    missing = "01a201d4-ac99-7df3-a000-000000000000"
    with pytest.raises(NotFound) as raised:
        await ClientOperator(client).get_run(missing)
    response = await http.get(f"/v1/runs/{missing}")
    assert response.status_code == 404
    assert response.json()["detail"] == str(raised.value) == f"no run {missing}"


async def test_cli_direct__canceling_a_missing_run_fails_with_the_routes_message(
    client: Client, http: httpx.AsyncClient
) -> None:
    missing = "01a201d4-ac99-7df3-a000-000000000001"
    with pytest.raises(NotFound) as raised:
        await ClientOperator(client).cancel(missing)
    response = await http.delete(f"/v1/runs/{missing}")
    assert response.status_code == 404
    assert response.json()["detail"] == str(raised.value) == f"no run {missing}"


async def test_cli_direct__a_bad_workflow_filter_fails_as_through_the_route(
    client: Client, http: httpx.AsyncClient
) -> None:
    with pytest.raises(InvalidInput, match="invalid workflow name 'Bad'"):
        await ClientOperator(client).list_runs("Bad", None, 20, None)
    assert (await http.get("/v1/runs", params={"workflow": "Bad"})).status_code == 422
