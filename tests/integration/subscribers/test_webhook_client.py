"""Webhooks through the public `Client`: subscribe, publish, the worker's dispatcher, redrive."""

from __future__ import annotations

import pytest
from standardwebhooks.webhooks import Webhook

from ripple.platform.core.config import Settings
from ripple.platform.errors import InvalidInput
from ripple.subscribers import WebhookTarget
from ripple.workflows.authoring.retry import RetryPolicy
from tests.helpers import rest_client
from tests.integration.subscribers.webhook_sink import Received, Reply, Sink

pytest.importorskip("ripple.workflows.runs.client", reason="the workflow client has not landed yet")


async def test_webhook_client__subscribe_publish_deliver_redrive(hook_settings: Settings) -> None:
    from ripple.platform.client import Client

    healthy = False

    def respond(_r: Received, _n: int) -> Reply:
        return Reply(200) if healthy else Reply(503)

    async with Client(settings=hook_settings) as client, Sink(respond) as sink:
        target = WebhookTarget(sink.url(), retry=RetryPolicy(max_attempts=1))
        sub = await client.subscribe("user.*", target)
        ev = await client.publish("user.signup", {"userId": 42})
        assert ev.deliveries == 1
        dispatcher = client.background_services(webhooks=True, sweeper=False)[0]
        await dispatcher.run_until_idle()  # type: ignore[attr-defined]

        page = await client.deliveries.list(status="failed")
        (failed,) = page.items
        assert (failed.subscription_id, failed.event_id) == (sub.id, ev.event_id)
        assert failed.last_status_code == 503

        healthy = True
        assert await client.deliveries.redrive(failed.id)
        await dispatcher.run_until_idle()  # type: ignore[attr-defined]
        delivered = await client.deliveries.get(failed.id)
        assert delivered is not None
        assert delivered.status == "delivered"
        attempts = await client.deliveries.attempts(failed.id)
        assert [a.status_code for a in attempts] == [503, 200]

    ids = {r.headers["webhook-id"] for r in sink.received}
    assert len(ids) == 1
    body = Webhook(target.secret).verify(sink.received[-1].body, sink.received[-1].headers)
    assert body == {"type": "user.signup", "timestamp": body["timestamp"], "data": {"userId": 42}}


async def test_webhook_client__subscribe_refuses_private_urls(settings: Settings) -> None:
    from ripple.platform.client import Client

    async with Client(settings=settings) as client:
        for url in (
            "http://127.0.0.1:8080/",
            "http://169.254.169.254/",
            "http://[::1]/",
            "http://10.0.0.1/",
            "http://[::ffff:192.168.0.1]/",
        ):
            with pytest.raises(InvalidInput, match="SSRF"):
                await client.subscribe("#", WebhookTarget(url))
        assert await client.list_subscriptions() == []


async def test_webhook_client__subscribe_refuses_recognisably_local_hosts(
    settings: Settings,
) -> None:
    """Hosts that are local whatever DNS says (or without any DNS) are refused when
    subscribing, in Python and over REST, not only when delivering."""
    from ripple.platform.client import Client

    urls = [
        "http://LOCALHOST.:8080/",
        "http://api.localhost/",
        "http://127.0.0.1.nip.io/hook",
        "http://app-10-0-0-1.sslip.io/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://[::ffff:127.0.0.1]/",
    ]
    async with Client(settings=settings) as client:
        for url in urls:
            with pytest.raises(InvalidInput, match="SSRF"):
                await client.subscribe("#", WebhookTarget(url))
        async with rest_client(client) as http:
            for url in urls:
                body = {"pattern": "#", "target": {"type": "webhook", "url": url}}
                response = await http.post("/v1/subscriptions", json=body)
                assert response.status_code == 422, (url, response.text)
                assert "SSRF" in response.json()["detail"], (url, response.text)
        assert await client.list_subscriptions() == []
