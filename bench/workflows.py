"""Workflow engine benchmarks: throughput, start→result latency, sleep lateness."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from bench.app import attrs3, looper, noop3, noop3_sync, one_step, sleeper
from bench.common import (
    bench_database,
    cpu_seconds,
    parent_pid,
    pct,
    postgres_cpu_seconds,
    report,
    subprocess_module,
    summary,
    write_xacts,
)
from ripple.platform.client import Client
from ripple.workflows.authoring.definition import WorkflowDefinition

RUNS = 2000
#: Whether any run is still active: one probe of the claim index's partial predicate.
ACTIVE_RUNS_LEFT = (
    "SELECT EXISTS (SELECT 1 FROM ripple_runs "
    "WHERE status IN ('pending', 'running', 'sleeping', 'waiting'))"
)
LATENCY_RUNS = 200
_DROP_ATTRIBUTES_TRIGGER = "DROP TRIGGER ripple_steps_attributes ON ripple_steps"
SLEEPS = 200


def _env(url: str, redis_url: str | None, prefix: str) -> dict[str, str]:
    return {
        "RIPPLE_DATABASE_URL": url,
        "RIPPLE_REDIS_URL": redis_url or "",
        "RIPPLE_REDIS_PREFIX": prefix,
        "RIPPLE_LOG_LEVEL": "warning",
    }


async def throughput(
    definition: WorkflowDefinition[Any, Any] = noop3, label: str = "", setup_sql: str = ""
) -> None:
    """Start RUNS runs as fast as one client can and wait until the worker completed them all.

    Completion is observed by asking whether any run is still active (one index probe every
    5 ms), not by 2,000 `result()` calls, so the figure is the engine's, not the client's read
    path. Write transactions are counted exactly (see `write_xacts`).
    """
    async with bench_database() as db, Client(settings=db.settings) as client:
        if setup_sql:
            await client.pool.execute(setup_sql)
        env = _env(db.url, db.settings.redis_url, db.settings.redis_prefix)
        async with subprocess_module("bench.worker", "100", env=env) as worker:
            before = await write_xacts()
            start_batches = client.workflows.start_batches
            postmaster = parent_pid(await client.pool.fetchval("SELECT pg_backend_pid()"))
            pg_before = postgres_cpu_seconds(postmaster)
            cpu_before = cpu_seconds(worker.pid)
            started = time.perf_counter()
            for batch in range(0, RUNS, 100):
                await asyncio.gather(
                    *(client.start(definition) for _ in range(batch, min(RUNS, batch + 100)))
                )
            starts_took = time.perf_counter() - started
            while await client.pool.fetchval(ACTIVE_RUNS_LEFT):  # noqa: ASYNC110 - polls Postgres
                await asyncio.sleep(0.005)
            elapsed = time.perf_counter() - started
            worker_cpu = cpu_seconds(worker.pid) - cpu_before
            pg_cpu = postgres_cpu_seconds(postmaster) - pg_before
            after = await write_xacts()
            start_xacts = client.workflows.start_batches - start_batches
            completed = await client.pool.fetchval(
                "SELECT count(*) FROM ripple_runs WHERE status = 'completed'"
            )
        assert completed == RUNS, f"only {completed} of {RUNS} runs completed"
        report(
            f"workflow throughput (3-step no-op{label})",
            f"{RUNS / elapsed:,.0f} runs/s ({RUNS} runs in {elapsed:.2f} s, concurrency 100; "
            f"the client's {RUNS} starts alone took {starts_took:.2f} s)",
        )
        per_run = (after - before - 1) / RUNS
        report(
            "  db write transactions per run",
            f"{per_run:.3f}: {start_xacts / RUNS:.3f} by the client's starts (group-committed), "
            f"{per_run - start_xacts / RUNS:.3f} by the worker",
        )
        report("  worker process CPU per run", f"{worker_cpu / RUNS * 1e6:.0f} µs")
        report(
            "  Postgres CPU per run",
            f"{pg_cpu / RUNS * 1e6:.0f} µs (the whole local server: run on a quiet one)",
        )


async def latency() -> None:
    """start→result of one run at a time, worker in another process: a 1-step run (no step
    flush: its one result commits with the completion) and a 3-step run (two group-commit
    flushes: each step's result is durable before the next step begins)."""
    async with bench_database() as db, Client(settings=db.settings) as client:
        env = _env(db.url, db.settings.redis_url, db.settings.redis_prefix)
        async with subprocess_module("bench.worker", "100", env=env):
            for definition, label in ((one_step, "1 step"), (noop3, "3 steps")):
                for _ in range(20):  # warm up connections and statement caches
                    await (await client.start(definition)).result(timeout=30)
                samples = []
                walls: dict[str, tuple[float, float]] = {}
                for _ in range(LATENCY_RUNS):
                    t0, wall0 = time.perf_counter(), time.time()
                    handle = await client.start(definition)
                    await handle.result(timeout=30)
                    samples.append(time.perf_counter() - t0)
                    walls[handle.run_id] = (wall0, wall0 + samples[-1])
                report(f"start→result latency ({label}, other process)", summary(samples))
                report("  where it goes (p50 of each hop)", await _hops(client, walls))


#: Per run: when its insert, its claim and its completion began, by the database's clock
#: (one machine: the caller's wall clock too). Each is a statement's start, so a hop includes
#: the commit of the statement before it.
RUN_TIMES = """
SELECT run_id, extract(epoch FROM created_at)::float8, extract(epoch FROM started_at)::float8,
       extract(epoch FROM completed_at)::float8
FROM ripple_runs WHERE run_id = ANY($1::text[])
"""


async def _hops(client: Client, walls: dict[str, tuple[float, float]]) -> str:
    """The p50 of each hop of a run's start→result path: the caller to its insert; the insert
    to the claim (its commit, the hint, the worker's wake-up); the claim to the completion (the
    claim and the run's execution); the completion to `result()` returning (its commit, the
    hint, the read). Medians of hops do not add up to the median of the whole."""
    hops: dict[str, list[float]] = {
        "call→insert": [],
        "insert→claim": [],
        "claim→completion": [],
        "completion→result": [],
    }
    for run_id, created, claimed, completed in await client.pool.fetch(RUN_TIMES, list(walls)):
        called, returned = walls[run_id]
        marks = (called, created, claimed, completed, returned)
        for name, (a, b) in zip(hops, itertools.pairwise(marks), strict=True):
            hops[name].append(b - a)
    medians = (f"{name} {pct(values, 50) * 1000:.2f}" for name, values in hops.items())
    return ", ".join(medians) + " ms"


async def sleep_lateness() -> None:
    async with bench_database() as db, Client(settings=db.settings) as client:
        env = _env(db.url, db.settings.redis_url, db.settings.redis_prefix)
        async with subprocess_module("bench.worker", "100", env=env):
            handles = []
            for _ in range(SLEEPS):
                handles.append(await client.start(sleeper, 1.0))
                await asyncio.sleep(0.005)  # spread the wake-ups over a second
            lateness = [
                float(x) for x in await asyncio.gather(*(h.result(timeout=60) for h in handles))
            ]
        report("1 s sleep lateness", summary(lateness))


async def loop_iterations() -> None:
    """One run of a durable loop, a step per iteration, `keep=10`: iterations per second, and
    the journal's size when it ends (bounded by `keep`, not by the iterations)."""
    iterations = 5000
    async with bench_database() as db, Client(settings=db.settings) as client:
        env = _env(db.url, db.settings.redis_url, db.settings.redis_prefix)
        async with subprocess_module("bench.worker", "100", env=env):
            await (await client.start(looper, 10)).result(timeout=60)  # warm up
            t0 = time.perf_counter()
            handle = await client.start(looper, iterations)
            await handle.result(timeout=600)
            elapsed = time.perf_counter() - t0
            rows = await client.pool.fetchval(
                "SELECT count(*) FROM ripple_steps WHERE run_id = $1", handle.run_id
            )
        report(
            "durable loop, 1-step body, keep=10",
            f"{iterations / elapsed:,.0f} iterations/s ({iterations} in {elapsed:.2f} s); "
            f"{rows} journal rows at the end",
        )


async def run() -> None:
    await throughput()
    await throughput(noop3_sync, ", sync steps")
    await throughput(attrs3, ", 3 search attributes")
    # What runs that set no attribute pay for them: the journal trigger's WHEN test.
    await throughput(noop3, ", without the attributes trigger", _DROP_ATTRIBUTES_TRIGGER)
    await latency()
    await sleep_lateness()
    await loop_iterations()
