"""Webhook benchmark: deliveries/s to a local sink, against bare aiohttp POSTs to the same sink.

Both run in a process of their own set up as `ripple worker` runs its loops (uvloop, startup
objects frozen: `bench.webhook_worker`), so the figure is a worker process's, not that of this
process after the suites before it; each times its own work, start-up left out.
"""

from __future__ import annotations

import asyncio

from bench.common import bench_database, report, report_vs, subprocess_module
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
        await client.subscribe("hook.#", WebhookTarget(f"http://127.0.0.1:{port}/a"))
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
