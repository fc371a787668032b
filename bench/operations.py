"""Operating runs and events: backfill throughput into a queue subscription, and the
time `retry_many` takes over 10,000 failed runs (each with a journal of two recorded steps and
the failed one). The rows are written with SQL first: what is measured is the operation."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from bench.common import bench_database, report
from ripple.platform.client import Client
from ripple.platform.events.backfill import SETTLE_MARGIN
from ripple.subscribers import QueueTarget

EVENTS = 50_000
FAILED_RUNS = 10_000

# $1 count: events of the last minute, matched against subscription-set version 0
_EVENTS = """
INSERT INTO ripple_events (id, topic, payload, created_at, subscriptions_version)
SELECT ripple_uuid7(now() - interval '1 minute' + g * interval '1 millisecond'),
       'order.created', jsonb_build_object('i', g, 'sku', 'A-1'),
       now() - interval '1 minute' + g * interval '1 millisecond', 0
FROM generate_series(1, $1) AS g
"""
# $1 count: failed runs whose third step failed
_RUNS = """
WITH runs AS (
    INSERT INTO ripple_runs (run_id, workflow, version, status, input, error, attempt,
                             started_at, completed_at)
    SELECT 'bench-' || g, 'bench-retry', 1, 'failed', jsonb_build_object('i', g),
           '{"type": "NonRetriableError", "message": "bug"}', 1, now(), now()
    FROM generate_series(1, $1) AS g
    RETURNING run_id
)
INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, output, error)
SELECT r.run_id, s.key, s.seq, 'run', s.status, 1, s.output, s.error
FROM runs r CROSS JOIN (VALUES
    ('a', 0, 'completed', '1'::jsonb, NULL::jsonb),
    ('b', 1, 'completed', '2'::jsonb, NULL::jsonb),
    ('c', 2, 'failed', NULL::jsonb, '{"type": "NonRetriableError", "message": "bug"}'::jsonb)
) AS s(key, seq, status, output, error)
"""


async def run() -> None:
    async with bench_database(pool_max_size=10) as db, Client(settings=db.settings) as client:
        await client.pool.execute(_EVENTS, EVENTS)
        await client.pool.execute("ANALYZE ripple_events")
        since = datetime.now(UTC) - timedelta(minutes=2)
        started = time.perf_counter()
        sub = await client.subscribe("order.*", QueueTarget("backfill"), backfill_since=since)
        elapsed = time.perf_counter() - started
        assert sub.backfill_delivered == EVENTS, sub
        queued = await client.pool.fetchval("SELECT count(*) FROM ripple_queue_messages")
        assert queued == EVENTS, queued
        settle = db.settings.poll_interval + SETTLE_MARGIN
        report(
            "backfill into a queue subscription",
            f"{EVENTS / (elapsed - settle):,.0f} events/s delivering ({EVENTS:,} events; "
            f"{elapsed:.2f} s in all, of which {settle:.2f} s is the fixed live-boundary wait)",
        )

        await client.pool.execute(_RUNS, FAILED_RUNS)
        await client.pool.execute("ANALYZE ripple_runs; ANALYZE ripple_steps")
        started = time.perf_counter()
        count = await client.retry_many(workflow="bench-retry", status="failed")
        elapsed = time.perf_counter() - started
        assert count == FAILED_RUNS, count
        report(
            "retry_many over 10,000 failed runs",
            f"{elapsed:.2f} s ({count / elapsed:,.0f} runs/s, batches of 500)",
        )
