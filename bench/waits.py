"""Wait/signal benchmarks: signal→resume latency, child-workflow round trip."""

from __future__ import annotations

import asyncio
import time

from bench.app import parent, waiter
from bench.common import bench_database, report, subprocess_module, summary
from bench.workflows import _env
from ripple.platform.client import Client

WAITS = 200
CHILDREN = 100


async def _until_waiting(client: Client, run_id: str) -> None:
    for _ in range(30_000):
        run = await client.get_run(run_id)
        if run is not None and run.status == "waiting":
            return
        await asyncio.sleep(0.002)
    raise TimeoutError(f"run {run_id} never started waiting")


async def run() -> None:
    async with bench_database() as db, Client(settings=db.settings) as client:
        env = _env(db.url, db.settings.redis_url, db.settings.redis_prefix)
        async with subprocess_module("bench.worker", "100", env=env):
            handles = [await client.start(waiter, i) for i in range(WAITS)]
            for h in handles:
                await _until_waiting(client, h.run_id)
            samples = []
            for i, h in enumerate(handles):
                t0 = time.perf_counter()
                await client.signal(h.run_id, "go", {"key": i})
                await h.result(timeout=30)
                samples.append(time.perf_counter() - t0)
            report("signal→resume→result latency", summary(samples))

            for _ in range(10):
                await (await client.start(parent, 1)).result(timeout=30)
            trips = []
            for _ in range(CHILDREN):
                t0 = time.perf_counter()
                await (await client.start(parent, 1)).result(timeout=30)
                trips.append(time.perf_counter() - t0)
            report("parent→child→parent round trip", summary(trips))
