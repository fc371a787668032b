"""Fixtures for webhook integration tests: settings admitting loopback, subscriptions, events."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool, transaction
from ripple.platform.core.ids import new_id
from ripple.platform.core.wake import NullWaker
from ripple.platform.events.fanout import PublishedEvent, SubscriptionRow
from ripple.subscribers.webhooks.signing import generate_secret
from ripple.subscribers.webhooks.webhook import Deliveries, WebhookKind

INSERT_SUBSCRIPTION = """
INSERT INTO ripple_subscriptions (id, pattern, kind, target, status)
VALUES ($1, $2, 'webhook', $3, 'active')
"""


@pytest.fixture
def hook_settings(settings: Settings) -> Settings:
    """Test settings that admit loopback webhooks (the local sinks)."""
    return settings.model_copy(
        update={
            "webhook_allowed_networks": ["127.0.0.0/8"],
            "webhook_concurrency": 8,
            "webhook_endpoint_concurrency": 2,
        }
    )


@pytest.fixture
def ops(pool: Pool, hook_settings: Settings) -> Deliveries:
    """The operator view of deliveries (`Client.deliveries`)."""
    return Deliveries(pool, NullWaker(), hook_settings)


class Hooks:
    """Creates webhook subscriptions (as rows) and fans events out through `WebhookKind`."""

    def __init__(self, pool: Pool, settings: Settings) -> None:
        self.pool = pool
        self.kind = WebhookKind(settings, NullWaker())

    async def subscribe(self, url: str, **target: Any) -> SubscriptionRow:
        row = {"type": "webhook", "url": url, "secret": generate_secret(), **target}
        sub = SubscriptionRow(id=str(uuid.uuid4()), pattern="#", kind="webhook", target=row)
        await self.pool.execute(INSERT_SUBSCRIPTION, uuid.UUID(sub.id), sub.pattern, row)
        return sub

    async def publish(
        self, subs: list[SubscriptionRow], topic: str = "user.signup", payload: Any = None
    ) -> PublishedEvent:
        event = PublishedEvent(
            event_id=new_id(),
            topic=topic,
            payload={"userId": 42} if payload is None else payload,
            created_at=datetime.now(UTC),
        )
        async with transaction(self.pool) as conn:
            await self.kind.fan_out(conn, [(event, subs)])
        return event

    async def deliveries(self, sub: SubscriptionRow) -> list[dict[str, Any]]:
        rows = await self.pool.fetch(
            "SELECT * FROM ripple_webhook_deliveries WHERE subscription_id = $1 ORDER BY id",
            uuid.UUID(sub.id),
        )
        return [dict(r) for r in rows]

    async def make_due(self) -> None:
        """Move time: every pending delivery is due now (instead of sleeping)."""
        await self.pool.execute(
            "UPDATE ripple_webhook_deliveries SET next_attempt_at = now() WHERE status = 'pending'"
        )


@pytest.fixture
def hooks(pool: Pool, hook_settings: Settings) -> Hooks:
    return Hooks(pool, hook_settings)


def only(items: list[Any], pred: Callable[[Any], bool] = bool) -> Any:
    found = [i for i in items if pred(i)]
    assert len(found) == 1, found
    return found[0]
