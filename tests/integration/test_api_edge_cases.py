"""Edge cases of the REST API, in process on a real database: NaN/Infinity refused in run inputs and
signal payloads (422), signal idempotency keys (header, query or body field)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from ripple.platform.client import Client

JSON = {"content-type": "application/json"}


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    return body


async def count(client: Client, table: str) -> int:
    return int(await client.pool.fetchval(f"SELECT count(*) FROM {table}"))


@pytest.mark.parametrize("token", [b"NaN", b"Infinity", b"-Infinity"])
async def test_rest_refuses_non_finite_numbers(
    client: Client, http: httpx.AsyncClient, token: bytes
) -> None:
    start = b'{"input": {"a": [1, ' + token + b"]}}"
    response = await http.post("/v1/workflows/raw/runs", content=start, headers=JSON)
    assert problem(response, 422)["type"].endswith("invalid-input")
    run_id = (await client.start("raw", {"a": 1})).run_id
    for path in (f"/v1/runs/{run_id}/signals/go", f"/v1/workflows/raw/runs/{run_id}/signals/go"):
        response = await http.post(path, content=b'{"v": ' + token + b"}", headers=JSON)
        problem(response, 422)
    response = await http.post(
        "/v1/signals", content=b'{"event": "e", "payload": ' + token + b"}", headers=JSON
    )
    problem(response, 422)
    assert await count(client, "ripple_runs") == 1
    assert await count(client, "ripple_signals") == 0


async def test_rest_signal_idempotency(client: Client, http: httpx.AsyncClient) -> None:
    run_id = (await client.start("never-served", None)).run_id
    by_id = f"/v1/runs/{run_id}/signals/go"
    by_name = f"/v1/workflows/never-served/runs/{run_id}/signals/go"
    answers = [
        await http.post(by_id, json={"n": 1}, headers={"Idempotency-Key": "h1"}),
        await http.post(by_id, json={"n": 1}, headers={"Idempotency-Key": "h1"}),
        await http.post(by_name, json={"n": 1}, headers={"Idempotency-Key": "h1"}),
        await http.post(by_name, json={"n": 2}, params={"idempotencyKey": "q2"}),
        await http.post(by_id, json={"n": 2}, params={"idempotencyKey": "q2"}),
    ]
    assert [r.status_code for r in answers] == [202] * 5
    assert {r.json()["buffered"] for r in answers} == {True}
    payloads = await client.pool.fetch("SELECT payload FROM ripple_signals ORDER BY id")
    assert [p["payload"] for p in payloads] == [{"n": 1}, {"n": 2}]
    # a body that happens to hold an `idempotencyKey` field is a payload like any other
    response = await http.post(by_id, json={"idempotencyKey": "x"})
    assert response.status_code == 202
    assert await count(client, "ripple_signals") == 3
    differ = await http.post(
        by_id, json={}, headers={"Idempotency-Key": "a"}, params={"idempotencyKey": "b"}
    )
    problem(differ, 422)

    body = {"event": "nobody.waits", "payload": {}, "idempotencyKey": "m1"}
    for _ in range(2):
        response = await http.post("/v1/signals", json=body)
        assert response.status_code == 200, response.text
        assert response.json() == {"resumed": 0}
    response = await http.post(
        "/v1/signals", json={"event": "nobody.waits"}, headers={"Idempotency-Key": "m2"}
    )
    assert response.status_code == 200
    assert await count(client, "ripple_signal_keys") == 4
    differ = await http.post("/v1/signals", json=body, headers={"Idempotency-Key": "other"})
    problem(differ, 422)
