"""Webhook deliveries as CloudEvents: verified by the Standard Webhooks library and parsed by the
official CloudEvents SDK, in structured and binary mode; the default body is unchanged."""

from __future__ import annotations

import httpx
import pytest
from cloudevents.core.bindings import http as ce_http
from cloudevents.core.formats.json import JSONFormat
from standardwebhooks.webhooks import Webhook

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.subscribers import WebhookTarget
from tests.integration.subscribers.webhook_sink import Received, Sink


async def _deliver(settings: Settings, fmt: str) -> tuple[Received, str, WebhookTarget]:
    source_settings = settings.model_copy(update={"event_source": "https://ripple.example/x"})
    async with Client(settings=source_settings) as client, Sink() as sink:
        target = WebhookTarget(sink.url(), format=fmt)
        await client.subscribe("user.*", target)
        published = await client.publish("user.signup", {"userId": 42, "name": "Zoë"})
        dispatcher = client.background_services(webhooks=True, sweeper=False)[0]
        await dispatcher.run_until_idle()  # type: ignore[attr-defined]
    (received,) = sink.received
    return received, published.event_id, target


@pytest.mark.parametrize("fmt", ["cloudevents", "cloudevents-binary"])
async def test_webhook_cloudevents__delivery_is_signed_and_a_cloudevent(
    hook_settings: Settings, fmt: str
) -> None:
    received, event_id, target = await _deliver(hook_settings, fmt)
    # The signature covers the exact body sent, whatever the format.
    verified = Webhook(target.secret).verify(received.body, received.headers)
    event = ce_http.from_http(ce_http.HTTPMessage(received.headers, received.body), JSONFormat())
    assert event.get_id() == event_id
    assert event.get_type() == "user.signup"
    assert event.get_source() == "https://ripple.example/x"
    assert event.get_data() == {"userId": 42, "name": "Zoë"}
    assert event.get_time() is not None
    if fmt == "cloudevents":
        assert received.headers["content-type"] == "application/cloudevents+json"
        assert verified["data"] == {"userId": 42, "name": "Zoë"}
    else:
        assert received.headers["ce-id"] == event_id
        assert verified == {"userId": 42, "name": "Zoë"}


async def test_webhook_cloudevents__default_format_keeps_ripple_body(
    hook_settings: Settings,
) -> None:
    received, _, target = await _deliver(hook_settings, "ripple")
    body = Webhook(target.secret).verify(received.body, received.headers)
    assert set(body) == {"type", "timestamp", "data"}
    assert not any(name.startswith("ce-") for name in received.headers)


async def test_webhook_cloudevents__unknown_format_is_refused(
    client: Client, http: httpx.AsyncClient
) -> None:
    with pytest.raises(ValueError, match="format"):
        WebhookTarget("https://example.com/hook", format="xml")
    answer = await http.post(
        "/v1/subscriptions",
        json={
            "pattern": "#",
            "target": {"type": "webhook", "url": "https://example.com/hook", "format": "xml"},
        },
    )
    assert answer.status_code == 422
    assert "format" in answer.text
    assert await client.list_subscriptions() == []
