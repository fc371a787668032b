"""Dead letter benchmark: what the deduplication probes cost a fan-out.

A dead letter's deduplication id lives in ripple_queue_dead_keys, so a backfill's or replay's
fan-out (and a send with deduplication ids) probes the messages and those keys per message
(queue_store, `DEDUP_HELD`); a publish's fan-out of the events it just wrote does not (their
ids are new). This times the fan-out statement with the probes against the publish's one
without them, interleaved on one connection, over a queue of 50,000 messages and 5,000 dead
deduplication ids, at 1, 32 and 200 messages per statement (medians).
"""

from __future__ import annotations

import statistics
import time
import uuid

from bench.common import bench_database, report
from ripple.platform.client import Client
from ripple.subscribers.queues import queue_store

ROUNDS = 600
BATCHES = (1, 32, 200)
BACKLOG = 50_000
DEAD_KEYS = 5_000


async def run() -> None:
    probed = queue_store.INSERT_FANOUT
    bare = queue_store.INSERT_FANOUT_FRESH
    async with bench_database() as db, Client(settings=db.settings) as client:
        pool = client.pool
        await pool.execute(
            "INSERT INTO ripple_queue_messages (queue, body, deduplication_id) "
            "SELECT q, '{}', gen_random_uuid()::text FROM generate_series(1, $1), "
            "unnest(array['probed', 'bare']) AS q",
            BACKLOG,
        )
        await pool.execute(
            "INSERT INTO ripple_queue_dead_keys (queue, deduplication_id, message_id, dead_at) "
            "SELECT q, gen_random_uuid()::text, 0, now() FROM generate_series(1, $1), "
            "unnest(array['probed', 'bare']) AS q",
            DEAD_KEYS,
        )
        await pool.execute("ANALYZE")
        variants = {"probed": probed, "bare": bare}
        for batch in BATCHES:
            times: dict[str, list[float]] = {name: [] for name in variants}
            async with pool.acquire() as conn:
                for i in range(ROUNDS):
                    for name in sorted(variants, reverse=i % 2 == 1):
                        doc = [
                            {
                                "queue": name,
                                "body": "{}",
                                "topic": "t",
                                "event": "e",
                                "dedup": str(uuid.uuid4()),
                                "schema": None,
                            }
                            for _ in range(batch)
                        ]
                        started = time.perf_counter()
                        await conn.execute(variants[name], doc)
                        times[name].append(time.perf_counter() - started)
            with_probes, without = (statistics.median(times[n][50:]) for n in ("probed", "bare"))
            report(
                f"fan-out of {batch}, with dedup probes (backfill) vs without (publish)",
                f"{with_probes * 1000:.3f} ms vs {without * 1000:.3f} ms without = "
                f"{with_probes / without:.0%}; medians of {ROUNDS - 50} interleaved statements",
            )
