"""REST and dashboard surfaces of search and approvals: `GET /v1/runs?where`, `GET
/v1/events`, `POST /v1/approvals/{token}`, `/approve/{token}`, the dashboard pages."""

from __future__ import annotations

import json
from typing import Any

import httpx

from ripple.platform.client import Client
from ripple.workflows import Worker, WorkflowContext, workflow
from tests.helpers import assert_eventually


@workflow(name="api-order")
async def api_order(ctx: WorkflowContext, inp: dict[str, Any]) -> str:
    ctx.set_attributes(**inp)
    return "ok"


@workflow(name="api-refund")
async def api_refund(ctx: WorkflowContext, inp: dict[str, Any]) -> dict[str, Any]:
    decision = await ctx.step.wait_for_approval(
        "refund-ok", timeout=inp.get("timeout", 60), details={"amount": 120, "note": "<b>hi</b>"}
    )
    return {"approved": decision.approved, "by": decision.by, "comment": decision.comment}


async def _orders(client: Client) -> list[str]:
    ids = []
    for inp in ({"customer": "acme", "amount": 150}, {"customer": "acme", "amount": 50}):
        ids.append((await client.start(api_order, inp)).run_id)
    async with Worker(client, [api_order], webhooks=False, sweeper=False):
        for run_id in ids:
            await client.workflows.handle(run_id).result(timeout=10)
    return ids


async def test_rest_runs_where__filters_and_a_bad_query_is_422_with_the_position(
    http: httpx.AsyncClient, client: Client
) -> None:
    big, _small = await _orders(client)
    where = 'customer = "acme" and amount > 100'
    for path in ("/v1/runs", "/v1/workflows/api-order/runs"):
        page = await http.get(path, params={"where": where})
        assert page.status_code == 200, page.text
        assert [r["runId"] for r in page.json()["items"]] == [big]
    bad = await http.get("/v1/runs", params={"where": "amount >> 3"})
    assert bad.status_code == 422
    assert bad.headers["content-type"].startswith("application/problem+json")
    assert "position 9" in bad.json()["detail"]
    assert bad.json()["errors"][0]["loc"] == ["query", "where"]


async def test_rest_events__topic_window_and_containment(
    http: httpx.AsyncClient, client: Client
) -> None:
    first = await client.publish("shop.order", {"customerId": 42, "total": 3})
    await client.publish("shop.order", {"customerId": 7})
    await client.publish("shop.user", {"customerId": 42})
    page = await http.get(
        "/v1/events", params={"topic": "shop.order", "where": json.dumps({"customerId": 42})}
    )
    assert page.status_code == 200, page.text
    [event] = page.json()["items"]
    assert (event["eventId"], event["topic"], event["payload"]) == (
        first.event_id,
        "shop.order",
        {"customerId": 42, "total": 3},
    )
    assert "publishedAt" in event
    for bad in ("[1]", "{nope"):
        answer = await http.get("/v1/events", params={"where": bad})
        assert answer.status_code == 422, answer.text
        assert answer.json()["errors"][0]["loc"] == ["query", "where"]
    wide = await http.get("/v1/events", params={"since": "2000-01-01T00:00:00Z"})
    assert wide.status_code == 422
    assert wide.json()["errors"][0]["loc"] == ["query", "since"]


async def _pending(http: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    async def listed() -> Any:
        items = (await http.get("/v1/approvals")).json()
        return next((i for i in items if i["runId"] == run_id), None)

    found: dict[str, Any] = await assert_eventually(listed)
    return found


async def test_rest_approvals__200_then_409_and_forged_404(
    http: httpx.AsyncClient, client: Client
) -> None:
    handle = await client.start(api_refund, {})
    async with Worker(client, [api_refund], webhooks=False, sweeper=False):
        item = await _pending(http, handle.run_id)
        assert item["state"] == "pending"
        assert item["details"] == {"amount": 120, "note": "<b>hi</b>"}
        token = item["url"].rsplit("/", 1)[-1]
        forged = await http.post(f"/v1/approvals/{token[:-3]}xyz", json={"approved": True})
        assert forged.status_code == 404
        ok = await http.post(
            f"/v1/approvals/{token}", json={"approved": True, "by": "ann", "comment": "fine"}
        )
        assert ok.status_code == 200, ok.text
        assert ok.json()["approved"] is True
        assert ok.json()["by"] == "ann"
        again = await http.post(f"/v1/approvals/{token}", json={"approved": False})
        assert again.status_code == 409
        assert await handle.result(timeout=10) == {
            "approved": True,
            "by": "ann",
            "comment": "fine",
        }


async def test_rest_approvals__expired_is_410(http: httpx.AsyncClient, client: Client) -> None:
    handle = await client.start(api_refund, {"timeout": 0.2})
    async with Worker(client, [api_refund], webhooks=False, sweeper=False):
        assert (await handle.result(timeout=10))["approved"] is False
    [item] = (await http.get("/v1/approvals", params={"pending": "false"})).json()
    assert item["state"] == "expired"
    token = item["url"].rsplit("/", 1)[-1]
    gone = await http.post(f"/v1/approvals/{token}", json={"approved": True})
    assert gone.status_code == 410


async def test_approve_page__shows_details_escaped_and_decides_once(
    http: httpx.AsyncClient, client: Client
) -> None:
    handle = await client.start(api_refund, {})
    async with Worker(client, [api_refund], webhooks=False, sweeper=False):
        item = await _pending(http, handle.run_id)
        page = await http.get(item["url"])
        assert page.status_code == 200
        assert "&lt;b&gt;hi&lt;/b&gt;" in page.text  # details are escaped
        assert 'id="approve"' in page.text
        assert 'id="reject"' in page.text
        done = await http.post(
            item["url"], data={"decision": "reject", "by": "bob", "comment": "too much"}
        )
        assert done.status_code == 200
        assert "rejected" in done.text
        again = await http.post(item["url"], data={"decision": "approve"})
        assert again.status_code == 409
        out = await handle.result(timeout=10)
    assert out == {"approved": False, "by": "bob", "comment": "too much"}
    assert (await http.get("/approve/not-a-token")).status_code == 404


async def test_dashboard__events_approvals_and_run_search_pages(
    http: httpx.AsyncClient, client: Client
) -> None:
    big, _ = await _orders(client)
    await client.publish("shop.order", {"customerId": 42})
    runs = await http.get("/ui/runs", params={"where": "amount > 100"})
    assert runs.status_code == 200
    assert big in runs.text
    assert (await http.get("/ui/runs", params={"where": "amount >"})).status_code == 200
    events = await http.get("/ui/events", params={"where": '{"customerId": 42}'})
    assert events.status_code == 200
    assert "shop.order" in events.text
    handle = await client.start(api_refund, {})
    async with Worker(client, [api_refund], webhooks=False, sweeper=False):
        await _pending(http, handle.run_id)
        approvals = await http.get("/ui/approvals")
        assert handle.run_id in approvals.text
        run_page = await http.get(f"/ui/runs/{handle.run_id}")
        assert "approval-pending" in run_page.text
        await client.cancel(handle.run_id)


async def test_cli_runs_list_where__answers_what_the_route_answers(
    http: httpx.AsyncClient, client: Client
) -> None:
    from ripple.platform.cli.direct import ClientOperator

    big, _ = await _orders(client)
    direct = await ClientOperator(client).list_runs(None, None, 20, None, "amount > 100")
    rest = (await http.get("/v1/runs", params={"where": "amount > 100", "limit": 20})).json()
    assert direct == rest
    assert [r["runId"] for r in direct["items"]] == [big]
