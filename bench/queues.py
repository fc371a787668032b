"""Queue benchmark: send→receive→ack throughput with 4 consumers, batches of 100.

Baseline: bare asyncpg sending the same batches, then `SKIP LOCKED` receive plus delete.
"""

from __future__ import annotations

import asyncio
import time

from bench.bare_pg import queue_roundtrip
from bench.common import bench_database, report, report_vs
from ripple.platform.client import Client

MESSAGES = 50_000
BATCH = 100
CONSUMERS = 4


async def run() -> None:
    async with bench_database(pool_max_size=20) as db, Client(settings=db.settings) as client:
        queues = client.queues
        body = {"order": 1, "items": [1, 2, 3]}
        started = time.perf_counter()
        for start in range(0, MESSAGES, BATCH):
            await queues.send_batch("bench", [body] * min(BATCH, MESSAGES - start))
        sent = time.perf_counter() - started
        received = 0

        async def consumer() -> None:
            nonlocal received
            while True:
                msgs = await queues.receive("bench", max_messages=BATCH, visibility_timeout=30)
                if not msgs:
                    return
                await queues.ack_batch("bench", [m.receipt for m in msgs])
                received += len(msgs)

        t0 = time.perf_counter()
        await asyncio.gather(*(consumer() for _ in range(CONSUMERS)))
        drained = time.perf_counter() - t0
        total = time.perf_counter() - started
        bare = await queue_roundtrip(db.url, MESSAGES, BATCH, CONSUMERS, db.settings.pool_max_size)
    report("queue send (batches of 100)", f"{MESSAGES / sent:,.0f} msgs/s")
    report(
        "queue receive+ack (4 consumers, batches of 100)",
        f"{received / drained:,.0f} msgs/s ({received} msgs)",
    )
    report_vs("queue send→receive→ack end to end", MESSAGES / total, bare, "msgs/s")
