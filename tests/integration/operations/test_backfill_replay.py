"""Backfilled subscriptions and replays: each retained event exactly once across the
live boundary while publishes continue, all three target kinds, replay to one subscription
only, and `since` older than the retention refused with nothing written."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.errors import InvalidInput, NotFound
from ripple.subscribers import QueueTarget, WebhookTarget, WorkflowTarget
from tests.helpers import assert_eventually

pytestmark = pytest.mark.timeout(120)

BEFORE = 400


async def _publish(client: Client, count: int, start: int = 0) -> list[str]:
    ids = []
    for i in range(start, start + count):
        ids.append((await client.publish("order.created", {"i": i})).event_id)
    return ids


async def test_backfill__queue_gets_each_event_once_while_publishes_continue(
    client: Client, settings: Settings
) -> None:
    t0 = datetime.now(UTC) - timedelta(seconds=1)
    await client.publish("invoice.created", {"i": -1})  # another topic: not delivered
    published = await _publish(client, BEFORE)
    received: Counter[str] = Counter()
    stop = asyncio.Event()

    async def consume() -> None:  # acks as it goes: no dedup by message existence helps
        while True:
            batch = await client.queues.receive("audit", max_messages=100, wait=0.2)
            if not batch and stop.is_set():
                return  # every publish had committed: the queue is drained
            for message in batch:
                received[message.headers["eventId"]] += 1
                await client.queues.ack("audit", message.receipt)

    async with Client(settings=settings) as other:  # a second process's publisher and cache

        async def publish_meanwhile() -> None:
            i = BEFORE
            while not stop.is_set():
                for publisher in (client, other):
                    published.append((await publisher.publish("order.created", {"i": i})).event_id)
                    i += 1
                await asyncio.sleep(0)

        publisher = asyncio.create_task(publish_meanwhile())
        consumer = asyncio.create_task(consume())
        sub = await client.subscribe("order.*", QueueTarget("audit"), backfill_since=t0)
        more = len(published) + 50
        await assert_eventually(lambda: len(published) >= more, timeout=30)
        stop.set()
        await publisher
        await consumer

    assert set(received) == set(published)
    assert max(received.values()) == 1
    assert sub.backfill_done_at is not None
    assert sub.backfill_delivered >= BEFORE
    assert await client.pool.fetchval("SELECT count(*) FROM ripple_backfill_events") == 0


async def test_backfill__workflow_and_webhook_targets(settings: Settings) -> None:
    local = settings.model_copy(update={"webhook_allowed_networks": ["127.0.0.0/8"]})
    async with Client(settings=local) as client:
        t0 = datetime.now(UTC) - timedelta(seconds=1)
        await _publish(client, 5)
        await client.publish("order.created", {"i": 99, "vip": True})
        runs = await client.subscribe(
            "order.#", WorkflowTarget("fulfil"), {"vip": True}, backfill_since=t0
        )
        hooks = await client.subscribe(
            "order.created", WebhookTarget("http://127.0.0.1:9/hook"), backfill_since=t0
        )
        await client.publish("order.created", {"i": 100, "vip": True})
        assert (runs.backfill_delivered, hooks.backfill_delivered) == (1, 6)
        inputs = await client.pool.fetch("SELECT input FROM ripple_runs ORDER BY input->>'i'")
        assert [r["input"]["i"] for r in inputs] == [100, 99]
        per_event = await client.pool.fetch(
            "SELECT event_id, count(*) AS n FROM ripple_webhook_deliveries GROUP BY event_id"
        )
        assert len(per_event) == 7
        assert {r["n"] for r in per_event} == {1}
        shown = await client.get_subscription(hooks.id)
        assert shown is not None
        assert shown.backfill_delivered == 6


async def test_replay__to_one_of_two_subscriptions(client: Client) -> None:
    t0 = datetime.now(UTC) - timedelta(seconds=1)
    first = await client.subscribe("order.*", QueueTarget("one"))
    await client.subscribe("order.*", QueueTarget("two"))
    ids = await _publish(client, 5)

    async def drain(queue: str) -> list[str]:
        out = []
        while batch := await client.queues.receive(queue, max_messages=100):
            for message in batch:
                out.append(message.headers["eventId"])
                await client.queues.ack(queue, message.receipt)
        return out

    assert sorted(await drain("one")) == sorted(ids)
    assert sorted(await drain("two")) == sorted(ids)
    assert await client.replay_events(first.id, t0) == 5
    assert sorted(await drain("one")) == sorted(ids)  # same event ids again
    assert await drain("two") == []
    # a range: only the events created inside it
    assert await client.replay_events(first.id, t0, until=t0 + timedelta(milliseconds=1)) == 0


async def test_replay__webhook_gets_new_delivery_ids_for_the_same_events(
    settings: Settings,
) -> None:
    local = settings.model_copy(update={"webhook_allowed_networks": ["127.0.0.0/8"]})
    async with Client(settings=local) as client:
        t0 = datetime.now(UTC) - timedelta(seconds=1)
        hook = await client.subscribe("order.created", WebhookTarget("http://127.0.0.1:9/h"))
        ids = await _publish(client, 3)
        assert await client.replay_events(hook.id, t0) == 3
        rows = await client.pool.fetch(
            "SELECT id, event_id FROM ripple_webhook_deliveries WHERE subscription_id = $1",
            hook.id,
        )
        assert len({r["id"] for r in rows}) == 6
        assert Counter(str(r["event_id"]) for r in rows) == Counter({i: 2 for i in ids})


async def test_backfill_and_replay__bad_input_changes_nothing(client: Client) -> None:
    too_old = datetime.now(UTC) - timedelta(days=30)
    with pytest.raises(InvalidInput, match=r"events are retained for 7 days"):
        await client.subscribe("order.*", QueueTarget("audit"), backfill_since=too_old)
    assert await client.list_subscriptions() == []
    sub = await client.subscribe("order.*", QueueTarget("audit"))
    with pytest.raises(InvalidInput, match=r"older than the event retention"):
        await client.replay_events(sub.id, too_old)
    with pytest.raises(NotFound):
        await client.replay_events("0193c2a4-0000-7000-8000-000000000000", datetime.now(UTC))
    recent = datetime.now(UTC) - timedelta(minutes=1)
    assert await client.replay_events(sub.id, recent) == 0  # nothing retained in range
    assert await client.pool.fetchval("SELECT count(*) FROM ripple_queue_messages") == 0


async def test_backfill__event_committed_late_behind_the_cursor_is_delivered_once(
    client: Client,
) -> None:
    t0 = datetime.now(UTC) - timedelta(seconds=1)
    async with client.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        # Matched against the set without the subscription; its created_at is this
        # transaction's start, earlier than the events the backfill's cursor passes meanwhile.
        late = await client.publish("order.created", {"i": "late"}, conn=conn)
        await _publish(client, 5)
        subscribing = asyncio.create_task(
            client.subscribe("order.*", QueueTarget("late-q"), backfill_since=t0)
        )

        async def last_pass_waits_for_the_open_publish() -> bool:
            waiting = await client.pool.fetchval(
                "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
                "WHERE c.relname = 'ripple_events' AND NOT l.granted"
            )
            return bool(waiting)

        await assert_eventually(last_pass_waits_for_the_open_publish, timeout=30)
        await tx.commit()
    sub = await subscribing
    rows = await client.pool.fetch(
        "SELECT headers->>'eventId' AS id, count(*) AS n FROM ripple_queue_messages "
        "WHERE queue = 'late-q' GROUP BY 1"
    )
    delivered = {r["id"]: r["n"] for r in rows}
    assert delivered[late.event_id] == 1
    assert set(delivered.values()) == {1}
    assert sub.backfill_delivered == 6
    assert len(delivered) == 6
