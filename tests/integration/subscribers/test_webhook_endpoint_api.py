"""A webhook endpoint's limits and circuit breaker through the client and the REST API."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import pytest

from ripple.platform.client import Client
from ripple.platform.errors import InvalidInput
from ripple.subscribers import RateLimit, WebhookTarget
from tests.helpers import csrf_of

URL = "http://127.0.0.1:9/hook"


@pytest.fixture
def settings(settings):  # type: ignore[no-untyped-def]
    return settings.model_copy(update={"webhook_allowed_networks": ["127.0.0.0/8"]})


async def _open_circuit(client: Client, subscription_id: str) -> None:
    """What five failures in a row leave behind (written directly: no endpoint is called)."""
    await client.pool.execute(
        "INSERT INTO ripple_webhook_health (subscription_id, failing_since, consecutive_failures,"
        " circuit_open_until) VALUES ($1, now(), 5, now() + interval '1 hour')",
        uuid.UUID(subscription_id),
    )


async def test_webhook_target__stores_its_limits(client: Client) -> None:
    target = WebhookTarget(
        URL, max_in_flight=4, rate_limit=RateLimit(100, per=timedelta(seconds=1))
    )
    sub = await client.subscribe("order.*", target)
    assert sub.target["maxInFlight"] == 4
    assert sub.target["rateLimit"] == {"limit": 100, "perSeconds": 1.0}
    plain = await client.subscribe("order.*", WebhookTarget(URL))
    assert plain.target["maxInFlight"] == 10
    assert "rateLimit" not in plain.target
    with pytest.raises(ValueError, match=r"max_in_flight|maxInFlight"):
        WebhookTarget(URL, max_in_flight=0)
    raw = {"type": "webhook", "url": URL, "maxInFlight": 0}
    with pytest.raises(InvalidInput, match="maxInFlight"):
        await client.subscriptions.subscribe("order.*", raw, None)
    raw = {"type": "webhook", "url": URL, "rateLimit": {"limit": 0}}
    with pytest.raises(InvalidInput, match="limit"):
        await client.subscriptions.subscribe("order.*", raw, None)
    raw = {"type": "webhook", "url": URL, "rateLimit": {"limit": 5, "burst": 2}}
    with pytest.raises(InvalidInput, match="rateLimit"):
        await client.subscriptions.subscribe("order.*", raw, None)
    raw = {"type": "webhook", "url": URL, "format": "xml"}
    with pytest.raises(InvalidInput, match="format"):
        await client.subscriptions.subscribe("order.*", raw, None)
    with pytest.raises(ValueError, match="invalid rate limit"):
        WebhookTarget(URL, rate_limit={"limit": 0})
    assert WebhookTarget(URL, rate_limit={"limit": 2}).to_row()["rateLimit"] == {
        "limit": 2,
        "perSeconds": 1.0,
    }


async def test_endpoint_rest__shows_the_circuit_and_resumes_it(
    client: Client, http: httpx.AsyncClient
) -> None:
    created = await http.post(
        "/v1/subscriptions",
        json={
            "pattern": "order.*",
            "target": {
                "type": "webhook",
                "url": URL,
                "maxInFlight": 3,
                "rateLimit": {"limit": 5, "perSeconds": 2},
            },
        },
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["target"]["maxInFlight"] == 3
    assert body["target"]["rateLimit"] == {"limit": 5, "perSeconds": 2.0}
    sub_id = body["id"]

    endpoint = (await http.get(f"/v1/subscriptions/{sub_id}/endpoint")).json()
    assert (endpoint["circuit"], endpoint["consecutiveFailures"], endpoint["inFlight"]) == (
        "closed",
        0,
        0,
    )
    await _open_circuit(client, sub_id)
    endpoint = (await http.get(f"/v1/subscriptions/{sub_id}/endpoint")).json()
    assert (endpoint["circuit"], endpoint["consecutiveFailures"]) == ("open", 5)
    assert endpoint["nextProbeAt"] is not None

    resumed = await http.post(f"/v1/subscriptions/{sub_id}/endpoint/resume")
    assert resumed.status_code == 200, resumed.text
    assert (resumed.json()["circuit"], resumed.json()["consecutiveFailures"]) == ("closed", 0)
    audit = await client.pool.fetchval(
        "SELECT count(*) FROM ripple_audit WHERE action = 'endpoint.resume' AND target = $1",
        sub_id,
    )
    assert audit == 1
    listed = await http.get("/v1/audit", params={"action": "endpoint.resume"})
    assert listed.status_code == 200, listed.text
    assert [e["target"] for e in listed.json()["items"]] == [sub_id]

    missing = await http.post(f"/v1/subscriptions/{uuid.uuid4()}/endpoint/resume")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    queued = await http.post(
        "/v1/subscriptions", json={"pattern": "a.*", "target": {"type": "queue", "queue": "q"}}
    )
    assert queued.status_code == 201, queued.text
    for method in ("GET", "POST"):
        suffix = "/resume" if method == "POST" else ""
        path = f"/v1/subscriptions/{queued.json()['id']}/endpoint{suffix}"
        assert (await http.request(method, path)).status_code == 409
    bad = await http.post(
        "/v1/subscriptions",
        json={"pattern": "a.*", "target": {"type": "webhook", "url": URL, "maxInFlight": 0}},
    )
    assert bad.status_code == 422


async def test_cli_operator__shows_and_resumes_an_endpoint(client: Client) -> None:
    from ripple.platform.cli.deliveries import _endpoint_line
    from ripple.platform.cli.direct import ClientOperator

    sub = await client.subscribe("order.*", WebhookTarget(URL))
    await _open_circuit(client, sub.id)
    op = ClientOperator(client)
    shown = await op.endpoint(sub.id)
    assert (shown["circuit"], shown["consecutiveFailures"]) == ("open", 5)
    assert _endpoint_line(shown).startswith(f"{sub.id}: circuit open, 5 failure(s)")
    resumed = await op.endpoint(sub.id, resume=True)
    assert resumed["circuit"] == "closed"


async def test_dashboard__shows_an_open_circuit_and_resumes_it(client: Client) -> None:
    from ripple.platform.api.app import create_app

    sub = await client.subscribe("order.*", WebhookTarget(URL, max_in_flight=4))
    await _open_circuit(client, sub.id)
    transport = httpx.ASGITransport(app=create_app(client))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as ui:
        page = await ui.get("/ui/topics")
        assert page.status_code == 200
        assert "circuit open" in page.text
        assert "0/4 in flight" in page.text
        assert f"/ui/subscriptions/{sub.id}/endpoint/resume" in page.text
        done = await ui.post(
            f"/ui/subscriptions/{sub.id}/endpoint/resume", data={"csrf": csrf_of(page.text)}
        )
        assert done.status_code == 303
        assert (await client.deliveries.endpoint(sub.id)).circuit == "closed"
        page = await ui.get("/ui/topics")
        assert "circuit closed" in page.text
        assert "Resume now" not in page.text
