"""Queue targets through the Client: message shape, long-poll wake-up, Redis down."""

from __future__ import annotations

import asyncio

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.subscribers import QueueTarget
from tests.helpers import assert_eventually


async def test_queue_target__message_is_payload_with_topic_headers(client: Client) -> None:
    await client.subscribe("#", QueueTarget("audit"))
    waiting = asyncio.create_task(client.queues.receive("audit", wait=30))
    result = await client.publish("billing.invoice.paid", {"invoice": 9})
    (message,) = await asyncio.wait_for(waiting, 20)
    assert message.body == {"invoice": 9}
    assert message.headers == {"topic": "billing.invoice.paid", "eventId": result.event_id}
    await client.queues.ack("audit", message.receipt)


async def test_queue_target__two_subscriptions_same_queue_get_one_message_each(
    client: Client,
) -> None:
    await client.subscribe("a.*", QueueTarget("q"))
    await client.subscribe("a.b", QueueTarget("q"))
    assert (await client.publish("a.b", {"n": 1})).deliveries == 2
    assert len(await client.queues.receive("q", max_messages=10)) == 2


async def test_queue_target__redis_down_still_delivers(settings: Settings) -> None:
    down = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    async with Client(settings=down) as publisher, Client(settings=down) as consumer:
        await publisher.subscribe("x.#", QueueTarget("q"))
        waiting = asyncio.create_task(consumer.queues.receive("q", wait=30))
        await publisher.publish("x.y", {"n": 1})
        (message,) = await asyncio.wait_for(waiting, 20)
        assert message.body == {"n": 1}


async def test_subscription_cache__redis_hint_reaches_other_client(settings: Settings) -> None:
    # A poll interval far beyond the test's patience: only the Redis hint can refresh `a`.
    slow = settings.model_copy(update={"poll_interval": 60.0})
    async with Client(settings=slow) as a, Client(settings=slow) as b:
        await a.waker.connected.wait()  # type: ignore[attr-defined]
        await b.waker.connected.wait()  # type: ignore[attr-defined]
        assert (await a.publish("x.y", {})).deliveries == 0  # a's cache is loaded and fresh
        await b.subscribe("x.*", QueueTarget("q"))

        async def delivered() -> bool:
            return (await a.publish("x.y", {})).deliveries == 1

        await assert_eventually(delivered, timeout=10)
