"""Webhook benchmark: deliveries/s to a local sink, against bare aiohttp POSTs to the same sink."""

from __future__ import annotations

import asyncio
import time

from bench.bare_http import aiohttp_posts
from bench.common import bench_database, report_vs, subprocess_module
from bench.publish import free_port
from ripple.platform.client import Client
from ripple.subscribers import WebhookTarget

#: Enough for a steady state: 3,000 took ~1 s, of which the first claims and 50 connection
#: set-ups were a visible share, on both sides.
EVENTS = 10_000
#: Deliveries in flight: overall, per endpoint and per origin alike (one endpoint here), and
#: the bare baseline's concurrency, so both do the same work.
CONCURRENCY = 50


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
        services = client.background_services(webhooks=True, sweeper=False)
        dispatcher = services[0]
        started = time.perf_counter()
        await dispatcher.run_until_idle()  # type: ignore[attr-defined]
        elapsed = time.perf_counter() - started
        delivered = await client.pool.fetchval(
            "SELECT count(*) FROM ripple_webhook_deliveries WHERE status = 'delivered'"
        )
        bare = await aiohttp_posts(f"http://127.0.0.1:{port}/b", CONCURRENCY, EVENTS)
    report_vs(
        "webhook deliveries to a local sink",
        delivered / elapsed,
        bare,
        "/s",
        f"{delivered}/{EVENTS} in {elapsed:.2f} s; {CONCURRENCY} in flight, bare aiohttp too",
    )
