"""Webhook benchmark: deliveries/s to a local sink, against bare aiohttp POSTs to the same sink;
then endpoint isolation: throughput to 50 fast endpoints beside one that answers after 5 s,
against 51 fast ones, and the latency of a fast endpoint while the slow one is saturated.

The first runs in a process of its own set up as `ripple worker` runs its loops (uvloop, startup
objects frozen: `bench.webhook_worker`), so the figure is a worker process's, not that of this
process after the suites before it; each times its own work, start-up left out. The isolation
rounds run a dispatcher in this process (both the same way, so they compare).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.common import bench_database, pct, report, report_vs, subprocess_module
from bench.publish import free_port
from ripple.platform.client import Client
from ripple.subscribers import WebhookTarget

#: Enough for a steady state: over fewer, the first claims and the connection set-ups are a
#: visible share, on both sides.
EVENTS = 10_000
#: Deliveries in flight: overall, per endpoint and per origin alike (one endpoint here), and
#: the bare baseline's concurrency, so both do the same work.
CONCURRENCY = 50


async def _timed(*args: str, env: dict[str, str] | None = None) -> tuple[int, float, float, int]:
    """(items, seconds, CPU seconds, GC collections) a `bench.webhook_worker` process reports
    for its work."""
    async with subprocess_module("bench.webhook_worker", *args, env=env) as proc:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 300)
        await proc.wait()
    items, seconds, cpu, collections = line.split()
    return int(items), float(seconds), float(cpu), int(collections)


async def run() -> None:
    port = free_port()
    async with (
        bench_database(
            webhook_allowed_networks=["127.0.0.0/8"],
            webhook_concurrency=CONCURRENCY,
            webhook_endpoint_concurrency=CONCURRENCY,
            webhook_origin_concurrency=CONCURRENCY,
        ) as db,
        Client(settings=db.settings) as client,
        subprocess_module("bench.sink", str(port)),
    ):
        # The endpoint's budget counts claims still held, buffered ones too (claims.py runs
        # ahead of the free slots by up to twice the concurrency): room for them, so the
        # figure is the dispatcher's, with 50 requests in flight at most.
        target = WebhookTarget(f"http://127.0.0.1:{port}/a", max_in_flight=3 * CONCURRENCY)
        await client.subscribe("hook.#", target)
        for start in range(0, EVENTS, 100):  # group-committed, so setting up takes ~2 s
            await asyncio.gather(
                *(client.publish("hook.event", {"n": n}) for n in range(start, start + 100))
            )
        env = {
            "RIPPLE_DATABASE_URL": db.url,
            "RIPPLE_REDIS_URL": db.settings.redis_url or "",
            "RIPPLE_REDIS_PREFIX": db.settings.redis_prefix,
            "RIPPLE_LOG_LEVEL": "warning",
            "RIPPLE_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8",
            "RIPPLE_WEBHOOK_CONCURRENCY": str(CONCURRENCY),
            "RIPPLE_WEBHOOK_ENDPOINT_CONCURRENCY": str(CONCURRENCY),
            "RIPPLE_WEBHOOK_ORIGIN_CONCURRENCY": str(CONCURRENCY),
        }
        made, elapsed, cpu, collections = await _timed("ripple", env=env)
        delivered = await client.pool.fetchval(
            "SELECT count(*) FROM ripple_webhook_deliveries WHERE status = 'delivered'"
        )
        posts, bare_elapsed, bare_cpu, bare_collections = await _timed(
            "bare", f"http://127.0.0.1:{port}/b", str(CONCURRENCY), str(EVENTS)
        )
    report_vs(
        "webhook deliveries to a local sink",
        delivered / elapsed,
        posts / bare_elapsed,
        "/s",
        f"{delivered}/{EVENTS} in {elapsed:.2f} s ({made} attempts); {CONCURRENCY} in flight, "
        "bare aiohttp too; each in a worker-like process",
    )
    report(
        "  process CPU per delivery",
        f"{cpu / max(made, 1) * 1e6:.0f} µs, bare aiohttp {bare_cpu / max(posts, 1) * 1e6:.0f} µs "
        f"per POST (of {elapsed * 1e6 / max(made, 1):.0f} and "
        f"{bare_elapsed * 1e6 / max(posts, 1):.0f} µs wall); GC collections {collections}, "
        f"bare {bare_collections}",
    )
    await isolation()


#: Fast endpoints of the isolation rounds, events published to all of them, deliveries queued
#: for the slow one first, its answer time, and the fast deliveries timed one at a time.
FAST_ENDPOINTS = 50
FAST_EVENTS = 200
SLOW_BACKLOG = 300
SLOW_ANSWER = 5.0
PROBES = 50


async def isolation() -> None:
    all_fast, _ = await _isolation_round(slow=False)
    with_slow, latencies = await _isolation_round(slow=True)
    report_vs(
        "webhooks: 50 fast endpoints beside 1 slow",
        with_slow,
        all_fast,
        "/s",
        f"the baseline is 51 fast; {SLOW_BACKLOG} deliveries queued first for an endpoint "
        f"answering after {SLOW_ANSWER:.0f} s",
    )
    report(
        "  fast endpoint latency, slow one saturated",
        f"p50 {pct(latencies, 50) * 1000:.1f} ms, p95 {pct(latencies, 95) * 1000:.1f} ms "
        f"(publish to delivered, {PROBES} events one at a time)",
    )


async def _isolation_round(*, slow: bool) -> tuple[float, list[float]]:
    """Fast deliveries/s with the 51st endpoint slow or fast, and (slow) the publish-to-
    delivered seconds of a fast endpoint's deliveries sent one at a time afterwards."""
    port = free_port()
    async with (
        bench_database(
            webhook_allowed_networks=["127.0.0.0/8"],
            webhook_concurrency=CONCURRENCY,
            webhook_origin_concurrency=CONCURRENCY,
            shutdown_grace=0.0,
        ) as db,
        Client(settings=db.settings) as client,
        subprocess_module("bench.sink", str(port), str(SLOW_ANSWER)),
    ):
        base = f"http://127.0.0.1:{port}"
        fast = [
            await client.subscribe("iso.fast", WebhookTarget(f"{base}/fast/{i}"))
            for i in range(FAST_ENDPOINTS)
        ]
        other = "/slow" if slow else f"/fast/{FAST_ENDPOINTS}"
        await client.subscribe("iso.other", WebhookTarget(base + other))
        probe = await client.subscribe("iso.probe", WebhookTarget(f"{base}/fast/probe"))
        await asyncio.gather(*(client.publish("iso.other", {"n": n}) for n in range(SLOW_BACKLOG)))
        await asyncio.gather(*(client.publish("iso.fast", {"n": n}) for n in range(FAST_EVENTS)))
        ids = [uuid.UUID(s.id) for s in fast]
        (dispatcher,) = [
            s
            for s in client.background_services(webhooks=True, sweeper=False)
            if s.name == "webhook-dispatcher"
        ]
        task = asyncio.create_task(dispatcher.run())
        try:
            started = time.perf_counter()
            want = FAST_ENDPOINTS * FAST_EVENTS
            await _poll(client, lambda n: n >= want, 0.02, _DELIVERED, ids)
            rate = want / (time.perf_counter() - started)
            latencies: list[float] = []
            for n in range(PROBES if slow else 0):
                await client.publish("iso.probe", {"n": n})
                seconds = await _poll(
                    client, lambda v: v is not None, 0.001, _LATENCY, uuid.UUID(probe.id)
                )
                latencies.append(seconds)
                await client.pool.execute(_FORGET, uuid.UUID(probe.id))
        finally:
            dispatcher.stop()
            await asyncio.wait_for(task, 30)
    return rate, latencies


async def _poll(
    client: Client, done: Callable[[Any], bool], interval: float, query: str, *args: Any
) -> Any:
    """Read `query` every `interval` seconds until `done` accepts its value; the value."""
    while True:
        value = await client.pool.fetchval(query, *args)
        if done(value):
            return value
        await asyncio.sleep(interval)


# $1 subscription ids: their delivered deliveries
_DELIVERED = """
SELECT count(*) FROM ripple_webhook_deliveries
WHERE subscription_id = ANY($1::uuid[]) AND status = 'delivered'
"""
# $1 subscription id: publish-to-delivered seconds of its delivered delivery, if any
_LATENCY = """
SELECT extract(epoch FROM delivered_at - created_at)::float8 FROM ripple_webhook_deliveries
WHERE subscription_id = $1 AND status = 'delivered'
"""
# $1 subscription id: forget its delivered deliveries (the next probe is timed alone)
_FORGET = """
DELETE FROM ripple_webhook_deliveries WHERE subscription_id = $1 AND status = 'delivered'
"""
