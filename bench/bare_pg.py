"""Bare asyncpg baselines: the rows Ripple writes, written by hand with no Ripple in the way.

Run against a database Ripple has migrated (the suites call these inside `bench_database`
after their own figure), into the same tables, so indexes and constraints cost the same.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import NamedTuple

import asyncpg

from ripple.platform.core.ids import uuid7

# The rows of publishes with a queue, a workflow and a webhook subscription: per event the
# event and one row per subscription; many events per transaction, one statement per table
# (the shape of a Ripple group commit).
INSERT_EVENTS = """
INSERT INTO ripple_events (id, topic, payload)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::jsonb[])
RETURNING id, created_at
"""
INSERT_QUEUE_MESSAGES = """
INSERT INTO ripple_queue_messages (queue, body, deduplication_id)
SELECT * FROM unnest($1::text[], $2::jsonb[], $3::text[])
"""
INSERT_RUNS = """
INSERT INTO ripple_runs (run_id, workflow, input, idempotency_key)
SELECT * FROM unnest($1::text[], $2::text[], $3::jsonb[], $4::text[])
"""
INSERT_DELIVERIES = """
INSERT INTO ripple_webhook_deliveries (id, subscription_id, event_id, topic, payload, event_time)
SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::text[], $5::jsonb[],
                     $6::timestamptz[])
"""

# Queues: batch send, then `SKIP LOCKED` receive (made invisible) and delete by id.
SEND = """
INSERT INTO ripple_queue_messages (queue, body)
SELECT $1, b::jsonb FROM unnest($2::text[]) AS b
"""
RECEIVE = """
WITH picked AS (
    SELECT id FROM ripple_queue_messages
    WHERE queue = $1 AND dead_at IS NULL AND group_id IS NULL AND visible_at <= now()
    ORDER BY visible_at LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE ripple_queue_messages m
SET receive_count = m.receive_count + 1, visible_at = now() + make_interval(secs => $3)
FROM picked WHERE m.id = picked.id
RETURNING m.id, m.body
"""
DELETE = "DELETE FROM ripple_queue_messages WHERE queue = $1 AND id = ANY($2::bigint[])"


async def publish_rows(
    url: str, events: int, writers: int = 3, group: int = 200, pool_size: int = 10
) -> float:
    """Events/s writing publishes' rows (event, queue message, run, delivery) in groups.

    `writers` transactions run at once, each writing up to `group` events with one statement
    per table: the most Ripple's group commit (3 flushers of up to 200 events) could reach.
    """
    pool = await asyncpg.create_pool(url, min_size=writers, max_size=max(writers, pool_size))
    assert pool is not None
    subscription = uuid.uuid4()
    starts = iter(range(0, events, group))

    async def writer() -> None:
        for start in starts:
            count = min(group, events - start)
            ids = [uuid7() for _ in range(count)]  # time-ordered: the tables are partitioned
            payloads = [
                json.dumps({"n": n, "user": {"id": n, "plan": "pro"}})
                for n in range(start, start + count)
            ]
            topics = ["bare.event"] * count
            async with pool.acquire() as conn, conn.transaction():
                rows = await conn.fetch(INSERT_EVENTS, ids, topics, payloads)
                created = {r["id"]: r["created_at"] for r in rows}
                keys = [str(i) for i in ids]
                await conn.execute(INSERT_QUEUE_MESSAGES, ["bare-audit"] * count, payloads, keys)
                await conn.execute(
                    INSERT_RUNS,
                    [uuid.uuid4().hex for _ in ids],
                    ["one-step"] * count,
                    payloads,
                    [f"event:{k}" for k in keys],
                )
                await conn.execute(
                    INSERT_DELIVERIES,
                    [uuid7() for _ in ids],
                    [subscription] * count,
                    ids,
                    topics,
                    payloads,
                    [created[i] for i in ids],
                )

    try:
        started = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(writers)))
        return events / (time.perf_counter() - started)
    finally:
        await pool.close()


class QueueRates(NamedTuple):
    """Msgs/s of a queue round: sending, receiving and deleting (acking), and end to end."""

    send: float
    drain: float
    total: float


async def queue_roundtrip(
    url: str, messages: int, batch: int, consumers: int, pool_size: int = 20
) -> QueueRates:
    """Sending `messages` in batches, then receiving and deleting them: the rates."""
    pool = await asyncpg.create_pool(url, min_size=consumers, max_size=pool_size)
    assert pool is not None
    body = json.dumps({"order": 1, "items": [1, 2, 3]})
    try:
        started = time.perf_counter()
        for start in range(0, messages, batch):
            await pool.execute(SEND, "bare", [body] * min(batch, messages - start))
        sent = time.perf_counter()

        async def consumer() -> None:
            while True:
                rows = await pool.fetch(RECEIVE, "bare", batch, 30.0)
                if not rows:
                    return
                await pool.execute(DELETE, "bare", [r["id"] for r in rows])

        await asyncio.gather(*(consumer() for _ in range(consumers)))
        done = time.perf_counter()
        return QueueRates(
            messages / (sent - started), messages / (done - sent), messages / (done - started)
        )
    finally:
        await pool.close()
