"""Jepsen-style queue check: consumers killed mid-batch lose nothing and never double-ack."""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import pytest

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool
from ripple.platform.core.wake import NullWaker
from ripple.subscribers.queues.queues import Queues

TOTAL = 10_000
QUEUE = "jepsen"


async def drain(queues: Queues, delivered: Counter[int], acked: Counter[int]) -> None:
    """Receive and ack until the queue is empty, counting deliveries and acks."""
    while True:
        got = await queues.receive(QUEUE, max_messages=500, visibility_timeout=60)
        if not got:
            return
        by_receipt = {m.receipt: m.body["i"] for m in got}
        delivered.update(by_receipt.values())
        acked.update(by_receipt[r] for r in await queues.ack_batch(QUEUE, list(by_receipt)))


@pytest.mark.slow
@pytest.mark.timeout(180)
async def test_queue__killed_consumers_lose_nothing_and_never_double_ack(
    pool: Pool, settings: Settings
) -> None:
    queues = Queues(pool, NullWaker(settings.poll_interval), settings)
    for start in range(0, TOTAL, 1000):
        await queues.send_batch(QUEUE, [{"i": i} for i in range(start, start + 1000)])

    delivered: Counter[int] = Counter()
    acked: Counter[int] = Counter()  # successful acks per message, as the acker saw them
    ack_attempted: set[int] = set()

    async def consumer() -> None:
        while True:
            got = await queues.receive(QUEUE, max_messages=100, visibility_timeout=1.0)
            for message in got:
                delivered[message.body["i"]] += 1
            await asyncio.sleep(0)  # a kill may land between receive and ack
            ack_attempted.update(m.body["i"] for m in got)
            done = set(await queues.ack_batch(QUEUE, [m.receipt for m in got]))
            for message in got:
                if message.receipt in done:
                    acked[message.body["i"]] += 1
            if not got:
                await asyncio.sleep(0.01)

    rng = random.Random(7)
    tasks = [asyncio.create_task(consumer()) for _ in range(4)]
    kills = 0
    try:
        while len(delivered) < TOTAL and kills < 200:
            await asyncio.sleep(rng.uniform(0.001, 0.03))
            victim = rng.randrange(len(tasks))
            tasks[victim].cancel()
            await asyncio.gather(tasks[victim], return_exceptions=True)
            tasks[victim] = asyncio.create_task(consumer())
            kills += 1
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # Final drain: whatever killed consumers held becomes visible (time moved in SQL).
    await pool.execute(
        "UPDATE ripple_queue_messages SET visible_at = now() WHERE queue = $1", QUEUE
    )
    await drain(queues, delivered, acked)

    stats = await queues.stats(QUEUE)
    lost = [i for i in range(TOTAL) if delivered[i] == 0]
    double_acked = [i for i, n in acked.items() if n > 1]
    # An ack cut off by a kill may have committed without its caller seeing it.
    unseen_acks = [i for i in range(TOTAL) if acked[i] == 0]
    duplicates = sum(delivered.values()) - TOTAL
    print(
        f"\njepsen: {TOTAL} messages, {kills} kills, {duplicates} duplicate deliveries, "
        f"{len(unseen_acks)} acks cut off by kills, {len(lost)} lost, "
        f"{len(double_acked)} acked twice"
    )
    assert lost == []
    assert double_acked == []
    assert set(unseen_acks) <= ack_attempted
    assert (stats.depth, stats.dead_letters) == (0, 0)
