"""Signal storm: many signals to waiting runs, each sent 2-3 times concurrently with the same
idempotency key (a client retrying an unacknowledged call), some of them while Postgres crashes
and restarts and while Redis is dead. Each signal must be consumed exactly once, in the order
it was sent, by the run it was sent to (`tests/chaos/storm_app.py` journals the order)."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter

import pytest

from ripple.platform.client import Client
from ripple.platform.errors import RippleError
from tests.chaos.conftest import FULL, Profile
from tests.chaos.figures import p50_max, record
from tests.e2e.resilience.conftest import Effects
from tests.e2e.resilience.procs import Workers
from tests.helpers import assert_eventually
from tests.servers import PostgresCluster, RedisProcess

pytestmark = pytest.mark.timeout(240 if FULL else 60)

RUNS, SIGNALS = (20, 15) if FULL else (8, 6)
APP = "tests.chaos.storm_app"


async def _wait_finished(client: Client, ids: list[str]) -> None:
    """Wait until every run ended; if one does not, print each run's state and inbox."""

    async def finished() -> bool:
        n = await client.pool.fetchval(
            "SELECT count(*) FROM ripple_runs WHERE run_id = ANY($1::text[]) "
            "AND status IN ('completed', 'failed', 'canceled')",
            ids,
        )
        return int(n) == len(ids)

    try:
        await assert_eventually(finished, timeout=40, interval=0.2)
    except AssertionError:
        rows = await client.pool.fetch(
            "SELECT r.run_id, r.status, "
            "(SELECT array_agg(s.key || ':' || s.status) FROM ripple_steps s "
            "WHERE s.run_id = r.run_id AND s.status <> 'completed') AS open, "
            "(SELECT array_agg(g.payload::text) FROM ripple_signals g WHERE g.run_id = r.run_id) "
            "AS inbox FROM ripple_runs r WHERE r.run_id = ANY($1::text[])",
            ids,
        )
        for row in rows:
            print(dict(row))
        raise


async def _signal(client: Client, run_id: str, seq: int, key: str) -> str:
    """One signal call: `ok`, or the type of the error it raised."""
    try:
        await asyncio.wait_for(client.signal(run_id, "item", {"seq": seq}, idempotency_key=key), 10)
        return "ok"
    except (RippleError, TimeoutError) as exc:
        return type(exc).__name__


async def test_signal_storm_with_retried_keys__each_consumed_once_in_order(
    chaos_client: Client,
    chaos_effects: Effects,
    chaos_workers: Workers,
    cluster: PostgresCluster,
    own_redis: RedisProcess,
    profile: Profile,
) -> None:
    rng = random.Random(18)
    await asyncio.gather(*(chaos_workers.start(concurrency=20, app=APP) for _ in range(2)))
    handles = [await chaos_client.start("inbox", SIGNALS) for _ in range(RUNS)]
    acked: Counter[str] = Counter()  # run_id -> signals acknowledged so far
    calls: Counter[str] = Counter()  # outcome of every call: ok or the error's type
    waits_after_fault: list[float] = []  # per signal hit by a fault: ack time after recovery
    fault_over = asyncio.Event()
    fault_over_at: list[float] = []
    during: Counter[str] = Counter()  # outcomes while a fault lasted

    async def send_until_acked(run_id: str, seq: int) -> None:
        key = f"{run_id}-item-{seq}"
        hit = False
        while True:
            copies = rng.choice((2, 3))  # the same call, sent again before the first answered

            outcomes = await asyncio.gather(
                *(_signal(chaos_client, run_id, seq, key) for _ in range(copies))
            )
            calls.update(outcomes)
            if fault_over_at and not fault_over.is_set():
                during.update(outcomes)
            if "ok" in outcomes:
                break
            hit = True
            await asyncio.sleep(0.1)
        if hit and fault_over_at:
            waits_after_fault.append(max(0.0, time.monotonic() - fault_over_at[-1]))
        acked[run_id] += 1

    async def sender(run_id: str) -> None:
        for seq in range(SIGNALS):  # in order: the next only after the previous was acked
            await send_until_acked(run_id, seq)
            await asyncio.sleep(rng.uniform(0.0, 0.05))

    senders = asyncio.gather(*(sender(h.run_id) for h in handles))
    total = RUNS * SIGNALS
    await assert_eventually(lambda: acked.total() >= total // 3, timeout=60)
    fault_over_at.append(time.monotonic())  # marks "a fault is on" for the counters
    cluster.crash()
    await asyncio.sleep(profile.outage)
    cluster.start()
    fault_over_at[-1] = time.monotonic()
    await assert_eventually(lambda: acked.total() >= 2 * total // 3, timeout=60)
    own_redis.kill()  # hints lost: waits resolve through polling
    await asyncio.wait_for(senders, 180)
    fault_over.set()
    own_redis.start()

    ids = [h.run_id for h in handles]

    await _wait_finished(chaos_client, ids)
    results = [await h.result(timeout=10) for h in handles]  # a lost signal: never completes
    consumed = Counter(seq for out in results for seq in out["order"])
    for run_id, out in zip(ids, results, strict=True):
        assert out["order"] == list(range(SIGNALS)), f"{run_id}: consumed {out['order']}"
        assert out["extra"] is None, f"{run_id}: a duplicate signal arrived: {out['extra']}"
    # Consumed signals leave the inbox; a duplicate arriving after the last wait would stay.
    left = await chaos_client.pool.fetchval(
        "SELECT count(*) FROM ripple_signals WHERE run_id = ANY($1::text[])", ids
    )
    duplicated = int(left) + sum(out["extra"] is not None for out in results)
    lost = total - consumed.total()
    assert (lost, duplicated) == (0, 0)
    record(
        "signal-storm",
        lost=lost,
        duplicated=duplicated,
        recovery=p50_max(waits_after_fault),
        during_outage=dict(during),
        runs=RUNS,
        signals=total,
        calls=calls.total(),
        refused=calls.total() - calls["ok"],
    )
