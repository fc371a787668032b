"""Publish through the Client to all three target kinds at once, including the outbox."""

from __future__ import annotations

import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.subscribers import QueueTarget, WebhookTarget, WorkflowTarget


async def counts(client: Client) -> tuple[int, int, int, int]:
    row = await client.pool.fetchrow(
        "SELECT (SELECT count(*) FROM ripple_events) AS events,"
        " (SELECT count(*) FROM ripple_queue_messages) AS messages,"
        " (SELECT count(*) FROM ripple_runs) AS runs,"
        " (SELECT count(*) FROM ripple_webhook_deliveries) AS deliveries"
    )
    assert row is not None
    return (row["events"], row["messages"], row["runs"], row["deliveries"])


async def test_publish__outbox_covers_queue_workflow_and_webhook(settings: Settings) -> None:
    local = settings.model_copy(update={"webhook_allowed_networks": ["127.0.0.0/8"]})
    async with Client(settings=local) as client:
        await client.subscribe("order.#", QueueTarget("orders"))
        await client.subscribe("order.*", WorkflowTarget("fulfil"))
        await client.subscribe("order.created", WebhookTarget("http://127.0.0.1:9/hook"))

        class Boom(Exception):
            pass

        async def failing_app_transaction() -> None:
            async with client.pool.acquire() as conn, conn.transaction():
                result = await client.publish("order.created", {"id": 1}, conn=conn)
                assert result.deliveries == 3
                raise Boom

        with pytest.raises(Boom):
            await failing_app_transaction()
        assert await counts(client) == (0, 0, 0, 0)

        async with client.pool.acquire() as conn, conn.transaction():
            await client.publish("order.created", {"id": 2}, conn=conn)
        assert await counts(client) == (1, 1, 1, 1)

        plain = await client.publish("order.created", {"id": 3}, idempotency_key="o3")
        again = await client.publish("order.created", {"id": 3}, idempotency_key="o3")
        assert (plain.deliveries, again.deliveries, again.event_id) == (3, 0, plain.event_id)
        assert await counts(client) == (2, 2, 2, 2)
