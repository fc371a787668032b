"""The Redis master killed under load, with Sentinel promoting its replica: the workers and the
client find the new master through Sentinel. Hints are lost during the switch, so work is
driven by the poll interval meanwhile; afterwards wake-ups carry it again."""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest
import redis

from ripple.platform.client import Client
from tests.chaos.conftest import FULL, chaos_environment
from tests.chaos.figures import record
from tests.e2e.resilience import app
from tests.e2e.resilience.conftest import Effects
from tests.e2e.resilience.procs import Workers
from tests.helpers import assert_eventually
from tests.servers import PostgresCluster, RedisSentinelSet

pytestmark = pytest.mark.timeout(240 if FULL else 90)

#: Poll interval of the workers: long, so work driven by polling shows as latency.
POLL = 2.0
PER_PHASE = 30 if FULL else 10


@pytest.fixture
def chaos_env(cluster: PostgresCluster, sentinels: RedisSentinelSet) -> dict[str, str]:
    return chaos_environment(
        cluster.url,
        RIPPLE_REDIS_SENTINELS=sentinels.addresses,
        RIPPLE_REDIS_SENTINEL_MASTER=sentinels.MASTER,
        RIPPLE_POLL_INTERVAL=str(POLL),
    )


async def _phase(client: Client, count: int) -> list[str]:
    """Start `count` runs, one every 50 ms, and wait until they all completed."""
    ids = []
    for _ in range(count):
        ids.append((await client.start(app.three_steps)).run_id)
        await asyncio.sleep(0.05)

    async def done() -> bool:
        n = await client.pool.fetchval(
            "SELECT count(*) FROM ripple_runs WHERE run_id = ANY($1::text[]) "
            "AND status = 'completed'",
            ids,
        )
        return int(n) == len(ids)

    await assert_eventually(done, timeout=120, interval=0.05)
    return ids


def _subscribers(port: int) -> int:
    with redis.Redis(port=port) as admin:
        return len(admin.client_list(_type="pubsub"))


async def _p50(client: Client, ids: list[str]) -> float:
    rows = await client.pool.fetch(
        "SELECT extract(epoch FROM completed_at - created_at) AS s FROM ripple_runs "
        "WHERE run_id = ANY($1::text[])",
        ids,
    )
    return statistics.median(float(row["s"]) for row in rows)


async def test_sentinel_failover__work_completes_and_wakeups_return(
    chaos_client: Client,
    chaos_effects: Effects,
    chaos_workers: Workers,
    sentinels: RedisSentinelSet,
) -> None:
    await asyncio.gather(*(chaos_workers.start(concurrency=20) for _ in range(2)))
    before = await _phase(chaos_client, PER_PHASE)
    baseline = _subscribers(sentinels.master.port)  # every process subscribed: hints worked

    killed = time.monotonic()
    sentinels.kill_master()
    during = asyncio.create_task(_phase(chaos_client, PER_PHASE))
    await asyncio.to_thread(sentinels.wait_failover)
    promoted = time.monotonic() - killed
    during_ids = await during
    await assert_eventually(
        lambda: _subscribers(sentinels.replica.port) >= baseline, timeout=30, interval=0.05
    )
    resubscribed = time.monotonic() - killed
    after = await _phase(chaos_client, PER_PHASE)

    for run_id in [*before, *during_ids, *after]:  # each step exactly once
        assert await chaos_effects.counts(run_id) == {"a": 1, "b": 1, "c": 1}
    p50 = {
        "before": await _p50(chaos_client, before),
        "during": await _p50(chaos_client, during_ids),
        "after": await _p50(chaos_client, after),
    }
    # Wake-ups carry the work again after the switch: far below the poll interval.
    assert p50["after"] < POLL / 2, p50
    record(
        "redis-sentinel-failover",
        lost=0,
        duplicated=0,
        recovery=f"{promoted:.2f}s to promote, {resubscribed:.2f}s to resubscribe",
        runs=3 * PER_PHASE,
        p50_before_s=f"{p50['before']:.3f}",
        p50_during_s=f"{p50['during']:.3f}",
        p50_after_s=f"{p50['after']:.3f}",
    )
