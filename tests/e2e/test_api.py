"""End to end: a real `ripple serve` process, every REST route exercised over HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.e2e.conftest import ApiServer, Process, free_port
from tests.helpers import assert_eventually

PROBLEM = "application/problem+json"


def problem(response: httpx.Response, status: int) -> dict[str, Any]:
    """Assert `response` is an RFC 9457 problem with `status`; return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM), response.headers
    body = response.json()
    assert body["status"] == status
    assert body["type"].startswith("urn:ripple:problem:")
    assert body["title"]
    assert body["detail"]
    assert body["instance"] == response.request.url.path
    return body


async def test_api__auth_is_required_on_v1_and_metrics(api_server: ApiServer) -> None:
    async with api_server.http(token=None) as anonymous:
        response = await anonymous.get("/v1/subscriptions")
        problem(response, 401)
        assert response.headers["www-authenticate"].startswith("Bearer")
        problem(await anonymous.get("/metrics"), 401)
        assert (await anonymous.get("/healthz")).json() == {"status": "ok"}
        ready = await anonymous.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["pendingMigrations"] == 0
        assert (await anonymous.get("/openapi.json")).status_code == 200
    async with api_server.http(token="wrong") as wrong:
        problem(await wrong.post("/v1/topics/a.b/events", json={"payload": 1}), 401)
    async with api_server.http(token="other-token") as second:
        assert (await second.get("/v1/subscriptions")).status_code == 200
    async with api_server.http() as http:
        metrics = await http.get("/metrics")
        assert metrics.status_code == 200
        assert "events_published" in metrics.text


async def test_api__limits_and_errors_are_problems(api_server: ApiServer) -> None:
    async with api_server.http() as http:
        big = json.dumps({"payload": "x" * (1024 * 1024 + 10)})
        body = problem(
            await http.post(
                "/v1/topics/a.b/events", content=big, headers={"content-type": "application/json"}
            ),
            413,
        )
        assert "RIPPLE_MAX_BODY_BYTES" in body["detail"]

        malformed = await http.post(
            "/v1/topics/a.b/events",
            content=b'{"payload": ',
            headers={"content-type": "application/json"},
        )
        assert problem(malformed, 400)["type"].endswith("malformed-json")

        deep = {"payload": json.loads("[" * 40 + "]" * 40)}
        assert problem(await http.post("/v1/topics/a.b/events", json=deep), 422)["type"].endswith(
            "json-too-deep"
        )

        invalid = problem(await http.post("/v1/subscriptions", json={"pattern": "a.*"}), 422)
        assert any(err["loc"][-1] == "target" for err in invalid["errors"])
        problem(await http.post("/v1/topics/Not A Topic/events", json={"payload": 1}), 422)
        problem(await http.get("/v1/runs", params={"limit": 100_000}), 422)

        assert "no route" in problem(await http.get("/v1/nothing-here"), 404)["detail"]
        problem(await http.put("/v1/subscriptions"), 405)
        missing = "01a201d4-ac99-7df3-a000-000000000000"
        problem(await http.get(f"/v1/subscriptions/{missing}"), 404)
        problem(await http.delete(f"/v1/subscriptions/{missing}"), 404)
        problem(await http.get(f"/v1/runs/{missing}"), 404)
        problem(await http.get(f"/v1/workflows/onboard-user/runs/{missing}/steps"), 404)
        problem(await http.get(f"/v1/deliveries/{missing}/attempts"), 404)
        problem(await http.post(f"/v1/deliveries/{missing}/redrive"), 404)


async def test_api__topics_subscriptions_and_queues(api_server: ApiServer) -> None:
    async with api_server.http() as http:
        created = await http.post(
            "/v1/subscriptions",
            json={
                "pattern": "billing.#",
                "target": {"type": "queue", "queue": "billing"},
                "filter": {"plan": "pro"},
            },
        )
        assert created.status_code == 201, created.text
        sub = created.json()
        assert sub["pattern"] == "billing.#"
        assert sub["target"] == {"type": "queue", "queue": "billing"}
        assert sub["status"] == "active"

        # The example app's setup() (serve --app) subscribed `onboard-user` to user.signup.
        listed = (await http.get("/v1/subscriptions")).json()
        assert [s["pattern"] for s in listed][:2] == ["user.signup", "billing.#"]
        assert (await http.get(f"/v1/subscriptions/{sub['id']}")).json()["id"] == sub["id"]

        explained = await http.get(
            "/v1/topics/billing.invoice.paid/explain", params={"payload": '{"plan": "free"}'}
        )
        assert explained.status_code == 200, explained.text
        (verdict,) = [
            v for v in explained.json()["subscriptions"] if v["subscriptionId"] == sub["id"]
        ]
        assert verdict["matched"] is False
        assert "plan" in verdict["reason"]
        problem(await http.get("/v1/topics/a.b/explain", params={"payload": "{nope"}), 400)

        first = await http.post(
            "/v1/topics/billing.invoice.paid/events",
            json={"payload": {"plan": "pro", "invoice": 7}, "idempotencyKey": "inv-7"},
        )
        assert first.status_code == 202, first.text
        assert first.json()["deliveries"] == 1
        again = await http.post(
            "/v1/topics/billing.invoice.paid/events",
            json={"payload": {"plan": "pro", "invoice": 7}, "idempotencyKey": "inv-7"},
        )
        assert again.json()["eventId"] == first.json()["eventId"]
        assert again.json()["deliveries"] == 0
        assert again.json()["duplicate"] is True

        received = await http.post(
            "/v1/queues/billing/messages/receive",
            json={"maxMessages": 10, "visibilityTimeout": 30, "wait": 2},
        )
        assert received.status_code == 200, received.text
        (message,) = received.json()["messages"]
        assert message["body"] == {"plan": "pro", "invoice": 7}
        assert message["headers"] == {
            "topic": "billing.invoice.paid",
            "eventId": first.json()["eventId"],
        }
        acked = await http.delete(f"/v1/queues/billing/messages/{message['receipt']}")
        assert acked.status_code == 204
        stale = await http.delete(f"/v1/queues/billing/messages/{message['receipt']}")
        assert stale.status_code in (404, 409)
        problem(stale, stale.status_code)

        sent = await http.post("/v1/queues/audit/messages", json={"body": {"x": 1}})
        assert sent.status_code == 201, sent.text
        assert sent.json()["id"]
        stats = (await http.get("/v1/queues/audit/stats")).json()
        assert stats["visible"] == 1
        assert stats["depth"] == 1
        got = (
            await http.post("/v1/queues/audit/messages/receive", json={"visibilityTimeout": 60})
        ).json()["messages"]
        nacked = await http.post(
            f"/v1/queues/audit/messages/{got[0]['receipt']}/nack", json={"delay": 0}
        )
        assert nacked.status_code == 204
        assert (await http.get("/v1/queues/audit/dead-letters")).json() == []
        redriven = await http.post("/v1/queues/audit/dead-letters/redrive", json={})
        assert redriven.json() == {"redriven": 0}

        paused = await http.post(f"/v1/subscriptions/{sub['id']}/pause")
        assert paused.json()["status"] == "paused"
        resumed = await http.post(f"/v1/subscriptions/{sub['id']}/resume")
        assert resumed.json()["status"] == "active"
        assert (await http.delete(f"/v1/subscriptions/{sub['id']}")).status_code == 204
        ids = [s["id"] for s in (await http.get("/v1/subscriptions")).json()]
        assert sub["id"] not in ids


async def _status(http: httpx.AsyncClient, run_id: str) -> str:
    response = await http.get(f"/v1/workflows/onboard-user/runs/{run_id}")
    assert response.status_code == 200, response.text
    status: str = response.json()["status"]
    return status


async def test_api__workflow_runs_signals_and_cancel(
    api_server: ApiServer, worker_process: Process
) -> None:
    async with api_server.http() as http:
        start = {"input": {"userId": 42, "email": "ann@example.com"}, "idempotencyKey": "ann"}
        created = await http.post("/v1/workflows/onboard-user/runs", json=start)
        assert created.status_code == 201, created.text
        run_id = created.json()["runId"]
        assert created.json()["status"] in ("pending", "running", "sleeping", "waiting")
        repeat = await http.post("/v1/workflows/onboard-user/runs", json=start)
        assert repeat.json()["runId"] == run_id

        bad = await http.post("/v1/workflows/onboard-user/runs", json={"input": {"userId": "x"}})
        problem(bad, 422)

        await assert_eventually(lambda: _is(http, run_id, "waiting"), timeout=30, interval=0.2)
        steps = (await http.get(f"/v1/workflows/onboard-user/runs/{run_id}/steps")).json()
        assert [s["key"] for s in steps][:3] == ["create-account", "send-welcome", "welcome-delay"]
        assert steps[0]["status"] == "completed"
        assert steps[0]["durationMs"] is not None

        resumed = await http.post(
            "/v1/signals", json={"event": "user.verified", "payload": {"userId": 42}}
        )
        assert resumed.json() == {"resumed": 1}
        await assert_eventually(lambda: _is(http, run_id, "completed"), timeout=30)
        run = (await http.get(f"/v1/runs/{run_id}")).json()
        assert run["output"]["verified"] is True
        assert run["completedAt"] is not None

        page = (await http.get("/v1/workflows/onboard-user/runs", params={"limit": 1})).json()
        assert [r["runId"] for r in page["items"]] == [run_id]
        filtered = await http.get("/v1/workflows/onboard-user/runs", params={"status": "failed"})
        assert filtered.json()["items"] == []
        summary = (await http.get("/v1/workflows")).json()
        assert {"name": "onboard-user", "runs": {"completed": 1}} in summary

        other = await http.post("/v1/workflows/onboard-user/runs", json={"input": {"userId": 7}})
        other_id = other.json()["runId"]
        signaled = await http.post(
            f"/v1/workflows/onboard-user/runs/{other_id}/signals/verified", json={"userId": 7}
        )
        assert signaled.status_code == 202, signaled.text
        assert signaled.json()["delivered"] or signaled.json()["buffered"]
        third = (
            await http.post("/v1/workflows/onboard-user/runs", json={"input": {"userId": 8}})
        ).json()["runId"]
        canceled = await http.delete(f"/v1/workflows/onboard-user/runs/{third}")
        assert canceled.json() == {"runId": third, "canceled": True}
        assert await _status(http, third) == "canceled"
        again = await http.delete(f"/v1/workflows/onboard-user/runs/{third}")
        assert again.json()["canceled"] is False
        problem(await http.get(f"/v1/workflows/other-flow/runs/{third}"), 404)


async def _is(http: httpx.AsyncClient, run_id: str, status: str) -> bool:
    return await _status(http, run_id) == status


async def test_api__webhook_deliveries_list_attempts_redrive(
    api_server: ApiServer, worker_process: Process
) -> None:
    async with api_server.http() as http:
        refused = await http.post(
            "/v1/subscriptions",
            json={"pattern": "order.#", "target": {"type": "webhook", "url": "http://10.0.0.1/"}},
        )
        problem(refused, 422)

        closed = f"http://127.0.0.1:{free_port()}/hooks"  # refuses connections: attempts fail
        sub = await http.post(
            "/v1/subscriptions",
            json={
                "pattern": "order.#",
                "target": {"type": "webhook", "url": closed, "retry": {"maxAttempts": 1}},
            },
        )
        assert sub.status_code == 201, sub.text
        assert sub.json()["target"]["secret"].startswith("whsec_")
        shown = (await http.get(f"/v1/subscriptions/{sub.json()['id']}")).json()
        assert shown["target"]["secret"] == "whsec_…"

        published = await http.post("/v1/topics/order.created/events", json={"payload": {"id": 1}})
        assert published.json()["deliveries"] == 1
        page = (await http.get("/v1/deliveries")).json()
        (delivery,) = page["items"]
        assert delivery["topic"] == "order.created"
        assert delivery["subscriptionId"] == sub.json()["id"]

        async def failed() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = (
                await http.get("/v1/deliveries", params={"status": "failed"})
            ).json()["items"]
            return found

        await assert_eventually(failed, timeout=30, interval=0.2)
        attempts = (await http.get(f"/v1/deliveries/{delivery['id']}/attempts")).json()
        assert len(attempts) == 1
        assert attempts[0]["error"]
        assert attempts[0]["statusCode"] is None
        redriven = await http.post(f"/v1/deliveries/{delivery['id']}/redrive")
        assert redriven.json() == {"redriven": 1}
        await assert_eventually(failed, timeout=30, interval=0.2)
        bulk = await http.post("/v1/deliveries/redrive", json={"subscriptionId": sub.json()["id"]})
        assert bulk.json() == {"redriven": 1}


async def test_api__schedules_and_run_priority(api_server: ApiServer) -> None:
    async with api_server.http() as http:
        for bad in (
            {"name": "s1", "workflow": "report", "cron": "99 * * * *"},
            {"name": "s1", "workflow": "report", "every": 5, "timezone": "Nowhere/Else"},
            {"name": "s1", "workflow": "report", "every": 0},
            {"name": "s1", "workflow": "report", "topic": "a.b", "every": 5},
        ):
            problem(await http.post("/v1/schedules", json=bad), 422)
        assert (await http.get("/v1/schedules")).json() == []
        created = await http.post(
            "/v1/schedules",
            json={
                "name": "api-nightly",
                "workflow": "report",
                "cron": "0 3 * * *",
                "timezone": "Europe/Berlin",
                "input": {"a": 1},
            },
        )
        assert created.status_code == 201, created.text
        assert created.json()["nextRunAt"]
        assert [s["name"] for s in (await http.get("/v1/schedules")).json()] == ["api-nightly"]
        assert (await http.post("/v1/schedules/api-nightly/pause")).json()["paused"] is True
        assert (await http.post("/v1/schedules/api-nightly/resume")).json()["paused"] is False
        run_id = (await http.post("/v1/schedules/api-nightly/trigger")).json()["runId"]
        run = (await http.get(f"/v1/runs/{run_id}")).json()
        assert run["input"] == {"a": 1}
        assert (await http.delete("/v1/schedules/api-nightly")).status_code == 204
        problem(await http.delete("/v1/schedules/api-nightly"), 404)
        problem(await http.get("/v1/schedules/api-nightly"), 404)
        problem(await http.post("/v1/schedules/api-nightly/trigger"), 404)

        problem(await http.post("/v1/workflows/report/runs", json={"priority": 5000}), 422)
        started = await http.post("/v1/workflows/report/runs", json={"input": {}, "priority": 7})
        assert started.status_code == 201, started.text
        shown = (await http.get(f"/v1/runs/{started.json()['runId']}")).json()
        assert shown["priority"] == 7
        assert "blockedBy" in shown
