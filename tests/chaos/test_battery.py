"""The chaos battery: Postgres stalls and crashes, a crashing step beside innocent runs, and
Redis lost or frozen, each against a running system. Every test asserts that each started run
ends as it should (none lost, none stuck, none failed for another run's fault) and prints its
figures: outcome counts, recovery time after the fault."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from typing import Any

from ripple.platform.client import Client
from ripple.platform.errors import RippleError
from tests.chaos.conftest import FULL, Profile
from tests.chaos.figures import record
from tests.e2e.resilience import app
from tests.e2e.resilience.conftest import Effects
from tests.e2e.resilience.procs import Workers
from tests.helpers import assert_eventually
from tests.servers import PostgresCluster, RedisProcess

ACTIVE = ("pending", "running", "sleeping", "waiting")


async def _statuses(client: Client, run_ids: list[str]) -> Counter[str]:
    rows = await client.pool.fetch(
        "SELECT status FROM ripple_runs WHERE run_id = ANY($1::text[])", run_ids
    )
    return Counter(row["status"] for row in rows)


async def _all_done(client: Client, run_ids: list[str]) -> bool:
    statuses = await _statuses(client, run_ids)
    return sum(statuses.values()) == len(run_ids) and not any(s in ACTIVE for s in statuses)


def _report(name: str, **figures: Any) -> None:
    record(name, **figures)


async def test_postgres_stall_longer_than_the_lease__no_run_is_stuck(
    chaos_client: Client,
    chaos_effects: Effects,
    chaos_workers: Workers,
    cluster: PostgresCluster,
    profile: Profile,
) -> None:
    """Every Postgres process frozen (SIGSTOP) past the lease while runs are in a long step:
    leases lapse, workers re-claim, stale writers are fenced out, and every run completes. (A
    worker that re-claimed its own run used to leave a slot behind that was heartbeated
    forever, the run `running` with nothing executing.)"""
    await asyncio.gather(*(chaos_workers.start(concurrency=10) for _ in range(2)))
    step_ms = int(profile.step * 1000)
    handles = [await chaos_client.start(app.ledger, [10, step_ms, 10]) for _ in range(profile.runs)]
    ids = [h.run_id for h in handles]

    async def in_long_step() -> bool:
        started = await chaos_effects.pool.fetchval(
            "SELECT count(DISTINCT run_id) FROM effects WHERE step = 'b.start'"
        )
        return int(started) == profile.runs

    await assert_eventually(in_long_step, timeout=60)
    frozen = cluster.freeze()
    await asyncio.sleep(profile.stall)
    cluster.thaw(frozen)
    thawed = time.monotonic()
    await assert_eventually(lambda: _all_done(chaos_client, ids), timeout=120, interval=0.1)
    recovery = time.monotonic() - thawed
    statuses = await _statuses(chaos_client, ids)
    assert statuses == Counter({"completed": profile.runs}), statuses
    for handle in handles:
        counts = await chaos_effects.counts(handle.run_id)
        assert counts["a.end"] == 1  # durable before b began: never re-run
        assert counts["c.start"] >= 1
    _report(
        "postgres-stall",
        runs=profile.runs,
        stall_s=profile.stall,
        lease_s=profile.lease,
        lost=profile.runs - statuses["completed"],
        duplicated=0,  # a.end once per run (asserted)
        recovery=f"{recovery:.1f}s",
        completed=statuses["completed"],
    )


async def test_postgres_crash_under_load__no_acknowledged_start_is_lost(
    chaos_client: Client,
    chaos_effects: Effects,
    chaos_workers: Workers,
    cluster: PostgresCluster,
    profile: Profile,
) -> None:
    """`pg_ctl stop -m immediate` while a client starts runs and workers execute them: every
    start that returned is a run that completes; calls during the outage fail with a clear
    error (Unavailable), never hang past it."""
    await chaos_workers.start(concurrency=20)
    acknowledged: list[str] = []
    refused: Counter[str] = Counter()
    stop = asyncio.Event()

    async def starter() -> None:
        rng = random.Random(11)
        while not stop.is_set():
            try:
                handle = await asyncio.wait_for(
                    chaos_client.start(app.ledger, [rng.randint(5, 30) for _ in range(3)]), 10
                )
                acknowledged.append(handle.run_id)
            except (RippleError, TimeoutError) as exc:
                refused[type(exc).__name__] += 1
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.01)

    task = asyncio.create_task(starter())
    await assert_eventually(lambda: len(acknowledged) >= 20, timeout=30)
    cluster.crash()
    down = time.monotonic()
    await asyncio.sleep(profile.outage)
    cluster.start()
    up = time.monotonic()
    await assert_eventually(lambda: len(acknowledged) >= 40 and refused.total() > 0, timeout=60)
    stop.set()
    await task
    await assert_eventually(
        lambda: _all_done(chaos_client, acknowledged), timeout=120, interval=0.2
    )
    recovery = time.monotonic() - up
    statuses = await _statuses(chaos_client, acknowledged)
    assert statuses == Counter({"completed": len(acknowledged)}), statuses  # lost: 0
    _report(
        "postgres-crash",
        acknowledged=len(acknowledged),
        lost=len(acknowledged) - statuses["completed"],
        recovery=f"{recovery:.1f}s",
        during_outage=dict(refused),
        outage_s=f"{up - down:.1f}",
    )


async def test_crashing_step_beside_innocent_runs__only_it_is_affected(
    chaos_client: Client, chaos_effects: Effects, chaos_workers: Workers, profile: Profile
) -> None:
    """A step that kills its worker process (os._exit-like SIGKILL) on its first three tries,
    executing beside innocent runs on the same worker: every innocent run completes, with no
    recorded step run twice; worker losses never spend a step's retry attempts."""
    supervisor = await chaos_workers.start(concurrency=20, restarts=5)
    innocent = [await chaos_client.start(app.ledger, [200, 200, 200]) for _ in range(profile.runs)]
    crasher = await chaos_client.start(app.flaky_crasher, 3)
    out = await crasher.result(timeout=120)
    assert out == 4  # the fourth try succeeded: 3 losses charged no retry attempt
    for handle in innocent:
        await handle.result(timeout=120)
    statuses = await _statuses(chaos_client, [h.run_id for h in innocent])
    assert statuses == Counter({"completed": profile.runs})
    deaths = [line for line in supervisor.stdout if line.startswith("exited")]
    assert deaths == ["exited -9"] * 3
    _report(
        "crashing-step",
        lost=profile.runs - statuses["completed"],
        duplicated=0,
        innocent=profile.runs,
        kills=3,
    )


async def test_redis_killed_then_frozen__work_completes(
    chaos_client: Client,
    chaos_effects: Effects,
    chaos_workers: Workers,
    own_redis: RedisProcess,
    profile: Profile,
) -> None:
    """Redis only wakes: killed (connections refused) and later frozen (connections hang),
    runs and signals still complete, driven by the poll interval."""
    await chaos_workers.start(concurrency=20)
    first = [await chaos_client.start(app.three_steps) for _ in range(profile.runs)]
    own_redis.kill()
    during_kill = [await chaos_client.start(app.three_steps) for _ in range(profile.runs)]
    waiting = await chaos_client.start(app.approval)
    await assert_eventually(lambda: chaos_effects.count(waiting.run_id, "before"), timeout=30)
    await chaos_client.signal(waiting.run_id, "approve", {"ok": True})
    ids = [h.run_id for h in [*first, *during_kill, waiting]]
    during = await _statuses(chaos_client, ids)  # Redis still dead
    await assert_eventually(lambda: _all_done(chaos_client, ids), timeout=60, interval=0.1)
    own_redis.start()
    own_redis.freeze()
    try:
        during_freeze = [
            await asyncio.wait_for(chaos_client.start(app.three_steps), 10)
            for _ in range(profile.runs)
        ]
        frozen_ids = [h.run_id for h in during_freeze]
        await assert_eventually(
            lambda: _all_done(chaos_client, frozen_ids), timeout=60, interval=0.1
        )
    finally:
        own_redis.thaw()
    statuses = await _statuses(chaos_client, [*ids, *frozen_ids])
    assert statuses == Counter({"completed": len(ids) + len(frozen_ids)})
    for handle in [*first, *during_kill, *during_freeze]:
        assert await chaos_effects.counts(handle.run_id) == {"a": 1, "b": 1, "c": 1}
    _report(
        "redis-killed-frozen",
        lost=len(ids) + len(frozen_ids) - statuses["completed"],
        during_outage=dict(during),
        duplicated=0,  # every step once (asserted)
        runs=len(ids) + len(frozen_ids),
    )


async def test_publish_fan_out_under_mixed_faults__nothing_acknowledged_is_lost(
    chaos_client: Client, cluster: PostgresCluster, own_redis: RedisProcess, profile: Profile
) -> None:
    """Publishers retry every publish with its idempotency key until it is acknowledged, while
    Redis is killed and Postgres crashes and restarts. Afterwards each event has exactly one
    message in each of two queue subscriptions: lost 0; duplicates counted (retries of an
    already committed publish return the first event and fan out nothing)."""
    from ripple.subscribers import QueueTarget

    await chaos_client.subscribe("chaos.order.*", QueueTarget("chaos-a"))
    await chaos_client.subscribe("chaos.#", QueueTarget("chaos-b"))
    events = 200 if FULL else 60
    acknowledged: dict[str, str] = {}
    attempts: Counter[str] = Counter()
    refused: Counter[str] = Counter()  # failed publish calls by error, during the outage

    async def publisher(worker: int) -> None:
        for n in range(worker, events, 4):
            key = f"order-{n}"
            while key not in acknowledged:
                attempts[key] += 1
                try:
                    result = await asyncio.wait_for(
                        chaos_client.publish("chaos.order.created", {"n": n}, key), 10
                    )
                    acknowledged[key] = result.event_id
                except (RippleError, TimeoutError) as exc:
                    refused[type(exc).__name__] += 1
                    await asyncio.sleep(0.05)

    publishers = asyncio.gather(*(publisher(w) for w in range(4)))
    await assert_eventually(lambda: len(acknowledged) >= events // 4, timeout=30)
    own_redis.kill()
    cluster.crash()
    await asyncio.sleep(profile.outage)
    cluster.start()
    await asyncio.wait_for(publishers, 120)
    own_redis.start()
    rows = await chaos_client.pool.fetch(
        "SELECT queue, headers->>'eventId' AS event_id, count(*) AS n FROM ripple_queue_messages "
        "GROUP BY 1, 2"
    )
    per_queue: dict[str, Counter[str]] = {"chaos-a": Counter(), "chaos-b": Counter()}
    for row in rows:
        per_queue[row["queue"]][row["event_id"]] += int(row["n"])
    ids = set(acknowledged.values())
    assert len(ids) == events  # one event per key, however often it was retried
    for queue, counts in per_queue.items():
        assert set(counts) == ids, f"{queue}: lost {len(ids - set(counts))}"
        assert set(counts.values()) == {1}, f"{queue}: duplicated"
    _report(
        "publish-fan-out",
        events=events,
        publish_attempts=attempts.total(),
        retried=attempts.total() - events,
        lost=0,
        duplicated=0,
        during_outage=dict(refused),
    )
