"""Flow-control and schedule benchmarks: throughput of a workflow with
`Concurrency(limit=1, key=k)` over 1,000 keys next to the unconstrained one, and how late an
`every=1s` schedule starts its runs."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

from bench.app import keyed3, noop3
from bench.common import bench_database, report, subprocess_module, summary
from bench.workflows import ACTIVE_RUNS_LEFT, RUNS, _env
from ripple.platform.client import Client

KEYS = 1000
TICKS = 20


async def keyed_throughput() -> None:
    """RUNS runs, two per key, Concurrency(limit=1) per key; then RUNS unconstrained runs."""
    rates = {}
    async with bench_database() as db, Client(settings=db.settings) as client:
        env = _env(db.url, db.settings.redis_url, db.settings.redis_prefix)
        async with subprocess_module("bench.worker", "100", env=env):
            for label, start in (
                ("unconstrained", lambda i: client.start(noop3)),
                ("keyed", lambda i: client.start(keyed3, {"k": i % KEYS})),
            ):
                started = time.perf_counter()
                for batch in range(0, RUNS, 100):
                    await asyncio.gather(*(start(i) for i in range(batch, batch + 100)))
                while await client.pool.fetchval(ACTIVE_RUNS_LEFT):  # noqa: ASYNC110 - polls
                    await asyncio.sleep(0.005)
                rates[label] = RUNS / (time.perf_counter() - started)
    report(
        f"Concurrency(limit=1) over {KEYS:,} keys",
        f"{rates['keyed']:,.0f} runs/s vs {rates['unconstrained']:,.0f} unconstrained in the "
        f"same run ({rates['keyed'] / rates['unconstrained']:.0%}; {RUNS} runs each, 2 per key)",
    )


async def schedule_lateness() -> None:
    """An every=1s schedule for TICKS ticks: run creation time minus tick time (both the
    database's clock)."""
    async with bench_database() as db, Client(settings=db.settings) as client:
        env = _env(db.url, db.settings.redis_url, db.settings.redis_prefix)
        async with subprocess_module("bench.worker", "100", env=env):
            await client.schedules.create("bench-tick", workflow="one-step", every=1)
            while True:
                rows = await client.pool.fetch(
                    "SELECT idempotency_key, created_at FROM ripple_runs WHERE workflow = $1",
                    "one-step",
                )
                if len(rows) >= TICKS:
                    break
                await asyncio.sleep(0.2)
    late = sorted(
        (
            row["created_at"] - datetime.fromisoformat(row["idempotency_key"].split(":", 2)[2])
        ).total_seconds()
        for row in rows
    )
    report(f"scheduler lateness (every=1s, {len(late)} ticks)", summary(late))


async def run() -> None:
    await keyed_throughput()
    await schedule_lateness()
