"""Redis pub/sub connections killed, repeatedly, under load (`CLIENT KILL TYPE pubsub` on the
test's own redis-server; ordinary connections, and Redis itself, stay up). Wake-up hints are
lost while the subscribers are gone: work must still complete (the poll interval drives it),
and once the kills stop the subscribers reconnect and latency returns to what it was."""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections import Counter

import pytest
import redis.asyncio as aioredis

from ripple.platform.client import Client
from tests.chaos.conftest import FULL
from tests.chaos.figures import record
from tests.e2e.resilience import app
from tests.e2e.resilience.conftest import Effects
from tests.e2e.resilience.procs import Workers
from tests.helpers import assert_eventually
from tests.servers import RedisProcess

pytestmark = pytest.mark.timeout(240 if FULL else 60)

#: Worker poll interval here: long, so a lost hint shows as latency (hinted work is ~ms).
POLL = 2.0
PER_PHASE = 40 if FULL else 12
KILL_EVERY = 0.05


async def _latencies(client: Client, run_ids: list[str]) -> list[float]:
    rows = await client.pool.fetch(
        "SELECT extract(epoch FROM completed_at - created_at) AS s FROM ripple_runs "
        "WHERE run_id = ANY($1::text[]) AND status = 'completed'",
        run_ids,
    )
    return [float(row["s"]) for row in rows]


async def _done(client: Client, run_ids: list[str]) -> bool:
    n = await client.pool.fetchval(
        "SELECT count(*) FROM ripple_runs WHERE run_id = ANY($1::text[]) AND status = 'completed'",
        run_ids,
    )
    return int(n) == len(run_ids)


async def test_redis_pubsub_connections_killed__work_completes_and_latency_recovers(
    chaos_client: Client,
    chaos_effects: Effects,
    chaos_workers: Workers,
    own_redis: RedisProcess,
) -> None:
    rng = random.Random(7)
    await asyncio.gather(
        *(chaos_workers.start(concurrency=20, RIPPLE_POLL_INTERVAL=str(POLL)) for _ in range(2))
    )
    admin = aioredis.Redis.from_url(own_redis.url)

    async def subscribers() -> int:
        return len(await admin.client_list(_type="pubsub"))

    async def phase(count: int) -> list[str]:
        """Start `count` runs at a steady pace (fixed seed) and wait until all completed."""
        ids = []
        for _ in range(count):
            ids.append((await chaos_client.start(app.three_steps)).run_id)
            await asyncio.sleep(rng.uniform(0.05, 0.15))
        await assert_eventually(lambda: _done(chaos_client, ids), timeout=90, interval=0.1)
        return ids

    try:
        before = await phase(PER_PHASE)
        baseline = await subscribers()  # every process subscribed: hints worked just now
        assert baseline >= 2

        async def resubscribed() -> bool:
            return await subscribers() >= baseline

        killed = Counter[str]()
        stop = asyncio.Event()

        async def killer() -> None:
            while not stop.is_set():
                killed["connections"] += int(
                    await admin.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
                )
                killed["rounds"] += 1
                await asyncio.sleep(KILL_EVERY)

        killing = asyncio.create_task(killer())
        during = await phase(PER_PHASE)
        during_statuses = Counter(
            row["status"]
            for row in await chaos_client.pool.fetch(
                "SELECT status FROM ripple_runs WHERE run_id = ANY($1::text[])", during
            )
        )
        stop.set()
        await killing
        stopped = time.monotonic()
        await assert_eventually(resubscribed, timeout=30, interval=0.05)
        reconnected = time.monotonic() - stopped
        after = await phase(PER_PHASE)
    finally:
        await admin.aclose()

    ids = [*before, *during, *after]
    for run_id in ids:  # every step exactly once, however the wake-ups went
        assert await chaos_effects.counts(run_id) == {"a": 1, "b": 1, "c": 1}
    p50 = {
        name: statistics.median(await _latencies(chaos_client, group))
        for name, group in (("before", before), ("during", during), ("after", after))
    }
    assert killed["connections"] > 0  # the kills hit the workers' subscriptions
    # Recovered: hints drive the work again, not the poll interval.
    assert p50["after"] < POLL / 2, p50
    record(
        "redis-pubsub-kill",
        lost=0,
        duplicated=0,
        recovery=f"{reconnected:.2f}s to resubscribe",
        during_outage=dict(during_statuses),
        runs=len(ids),
        pubsub_killed=killed["connections"],
        kill_rounds=killed["rounds"],
        p50_before_s=f"{p50['before']:.3f}",
        p50_during_s=f"{p50['during']:.3f}",
        p50_after_s=f"{p50['after']:.3f}",
    )
