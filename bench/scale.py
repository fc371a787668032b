"""`make bench-scale`: how Ripple scales with worker and publisher processes on one Postgres.

Runs the 3-step no-op workload with 1, 2, 4, 8 worker processes and publish-with-fan-out (a
queue and a workflow subscription) with 1, 2, 4 publisher processes, against a Postgres cluster
of its own (initdb in a temporary directory, fsync on), so that every process of that server
is the benchmark's: its CPU is read from /proc (the postmaster, its live children and the ones
it reaped), and its transaction counter counts only the benchmark's writes.

Per level it prints throughput, write transactions/s, Postgres's share of the CPU used, claim
(or publish) latency p99, and efficiency: work per CPU-second of workers + API (the bench
process starting runs, or the publishers) + Postgres. Then the knee (the first level that adds
under 10 %), what saturates there, and what the measured CPU costs predict for a machine whose
database has cores of its own.

Sizes: RIPPLE_SCALE_RUNS (default 3000), RIPPLE_SCALE_EVENTS (3000), RIPPLE_SCALE_WORKERS
("1,2,4,8"), RIPPLE_SCALE_PUBLISHERS ("1,2,4"), RIPPLE_SCALE_CONCURRENCY (runs per worker,
default 50).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from bench.common import (
    bench_database,
    cpu_seconds,
    machine_cpu,
    pct,
    postgres_cpu_seconds,
    report,
    write_xacts,
)
from bench.workflows import ACTIVE_RUNS_LEFT
from ripple.platform.client import Client
from ripple.subscribers import QueueTarget, WorkflowTarget
from tests.servers import PostgresCluster

RUNS = int(os.environ.get("RIPPLE_SCALE_RUNS", "3000"))
EVENTS = int(os.environ.get("RIPPLE_SCALE_EVENTS", "3000"))
WORKERS = [int(n) for n in os.environ.get("RIPPLE_SCALE_WORKERS", "1,2,4,8").split(",")]
PUBLISHERS = [int(n) for n in os.environ.get("RIPPLE_SCALE_PUBLISHERS", "1,2,4").split(",")]
CONCURRENCY = int(os.environ.get("RIPPLE_SCALE_CONCURRENCY", "50"))
CORES = os.cpu_count() or 1


@dataclass
class Level:
    """One measured level: `processes` workers (or publishers)."""

    processes: int
    done: int
    elapsed: float
    xacts: int
    app_cpu: float  # workers or publishers, plus the bench process
    pg_cpu: float
    latencies: list[float]
    #: CPU seconds the whole machine was busy during the level (every tenant's processes)
    machine_busy: float = float("nan")

    @property
    def rate(self) -> float:
        return self.done / self.elapsed

    @property
    def cpu(self) -> float:
        return self.app_cpu + self.pg_cpu

    def line(self, unit: str, latency: str) -> str:
        return (
            f"{self.rate:7,.0f} {unit}/s  {self.xacts / self.elapsed:7,.0f} write xact/s  "
            f"pg {self.pg_cpu / self.cpu:4.0%} of {self.cpu / self.elapsed:4.2f} busy cores  "
            f"{latency} p99 {pct(self.latencies, 99) * 1000:7.1f} ms  "
            f"{self.done / self.cpu:6,.0f} {unit}/CPU-s  "
            f"machine {self.machine_busy / self.elapsed:4.2f} busy cores"
        )


class Proc:
    """A `python -m module` subprocess that prints `ready`, then one JSON line when done."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    @classmethod
    async def start(cls, env: dict[str, str], module: str, *args: str) -> Proc:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            module,
            *args,
            env={**os.environ, **env},
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 120)
        if b"ready" not in line:
            raise RuntimeError(f"{module} did not start: {line!r}")
        return cls(proc)

    def cpu(self) -> float:
        return cpu_seconds(self.proc.pid)

    async def result(self, *, stop: bool) -> dict[str, list[float]]:
        if stop and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        assert self.proc.stdout is not None
        out = await asyncio.wait_for(self.proc.stdout.read(), 60)
        await self.proc.wait()
        lines = [line for line in out.decode().splitlines() if line.startswith("{")]
        return dict(json.loads(lines[-1])) if lines else {}


def _env(db_url: str, settings_prefix: str, redis_url: str | None) -> dict[str, str]:
    return {
        "RIPPLE_DATABASE_URL": db_url,
        "RIPPLE_REDIS_URL": redis_url or "",
        "RIPPLE_REDIS_PREFIX": settings_prefix,
        "RIPPLE_LOG_LEVEL": "warning",
        "RIPPLE_POOL_MAX_SIZE": "10",
    }


@contextlib.asynccontextmanager
async def measured(pg_url: str, postmaster: int, procs: Sequence[Proc]) -> AsyncIterator[dict]:  # type: ignore[type-arg]
    """Counters before and after the block: write xacts, CPU of `procs` + this process + PG."""
    out: dict[str, float] = {}
    xacts = await write_xacts(pg_url)
    app = sum(p.cpu() for p in procs) + cpu_seconds(os.getpid())
    pg = postgres_cpu_seconds(postmaster)
    machine = machine_cpu()[0]
    started = time.perf_counter()
    yield out
    out["elapsed"] = time.perf_counter() - started
    out["app_cpu"] = sum(p.cpu() for p in procs) + cpu_seconds(os.getpid()) - app
    out["pg_cpu"] = postgres_cpu_seconds(postmaster) - pg
    out["machine"] = machine_cpu()[0] - machine
    out["xacts"] = await write_xacts(pg_url) - xacts - 1


async def workflow_level(pg_url: str, postmaster: int, workers: int) -> Level:
    """RUNS 3-step runs started by this process, executed by `workers` worker processes."""
    async with bench_database(pg_url) as db, Client(settings=db.settings) as client:
        env = _env(db.url, db.settings.redis_prefix, db.settings.redis_url)
        procs = await asyncio.gather(
            *(Proc.start(env, "bench.scale_worker", str(CONCURRENCY)) for _ in range(workers))
        )
        try:
            async with measured(pg_url, postmaster, procs) as m:
                for batch in range(0, RUNS, 100):
                    await asyncio.gather(
                        *(client.start("noop3") for _ in range(batch, min(RUNS, batch + 100)))
                    )
                while await client.pool.fetchval(ACTIVE_RUNS_LEFT):  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
        finally:
            results = [await p.result(stop=True) for p in procs]
        done = await client.pool.fetchval(
            "SELECT count(*) FROM ripple_runs WHERE status = 'completed'"
        )
    claims = [c for r in results for c in r.get("claims", [])]
    return Level(
        workers, done, m["elapsed"], int(m["xacts"]), m["app_cpu"], m["pg_cpu"], claims,
        m["machine"],
    )  # fmt: skip


async def publish_level(pg_url: str, postmaster: int, publishers: int) -> Level:
    """EVENTS events published by `publishers` processes (16 concurrent publishes each),
    each fanned out to a queue and a workflow (whose runs stay pending: no worker)."""
    async with bench_database(pg_url) as db, Client(settings=db.settings) as client:
        await client.subscribe("scale.#", QueueTarget("scale-audit"))
        await client.subscribe("scale.*", WorkflowTarget("one-step"))
        env = _env(db.url, db.settings.redis_prefix, db.settings.redis_url)
        share = EVENTS // publishers
        procs = await asyncio.gather(
            *(Proc.start(env, "bench.scale_publisher", str(share), "16") for _ in range(publishers))
        )
        # The publishers exit before the block ends: they report their own CPU.
        async with measured(pg_url, postmaster, []) as m:
            for p in procs:
                assert p.proc.stdin is not None
                p.proc.stdin.write(b"go\n")
                await p.proc.stdin.drain()
            results = [await p.result(stop=False) for p in procs]
    m["app_cpu"] += sum(c for r in results for c in r.get("cpu", []))
    latencies = [x for r in results for x in r.get("publishes", [])]
    assert len(latencies) == share * publishers
    return Level(
        publishers, len(latencies), m["elapsed"], int(m["xacts"]), m["app_cpu"], m["pg_cpu"],
        latencies, m["machine"],
    )  # fmt: skip


def knee(levels: Sequence[Level]) -> Level:
    """The last level before one that adds under 10 % (the best level if all add more)."""
    for previous, level in itertools.pairwise(levels):
        if level.rate < previous.rate * 1.10:
            return previous
    return max(levels, key=lambda lv: lv.rate)


def conclude(kind: str, unit: str, levels: Sequence[Level]) -> None:
    at = knee(levels)
    busy = at.cpu / at.elapsed
    pg_cores = at.pg_cpu / at.elapsed
    machine = at.machine_busy / at.elapsed
    if machine >= 0.85 * CORES and busy < 0.85 * CORES:
        what = (
            f"the machine's CPU, shared: {machine:.2f} of {CORES} cores busy, {busy:.2f} of "
            f"them the benchmark's (Postgres {pg_cores:.2f}); other tenants took the rest"
        )
    elif busy >= 0.85 * CORES:
        what = f"the machine's CPU ({busy:.2f} of {CORES} cores busy; Postgres {pg_cores:.2f})"
    elif pg_cores >= 0.85:
        what = f"Postgres's CPU ({pg_cores:.2f} cores; one backend per connection)"
    else:
        what = (
            f"not CPU ({busy:.2f} of {CORES} cores busy): waits on commits (WAL flush), row "
            "locks or wake-up latency"
        )
    report(
        f"{kind}: knee",
        f"at {at.processes} process(es), {at.rate:,.0f} {unit}/s; saturates {what}",
    )
    best = max(levels, key=lambda lv: lv.done / lv.cpu)
    app_per = best.app_cpu / best.done
    pg_per = best.pg_cpu / best.done
    report(
        f"{kind}: CPU per {unit[:-1] if unit.endswith('s') else unit}",
        f"app {app_per * 1e6:,.0f} µs + Postgres {pg_per * 1e6:,.0f} µs "
        f"(at {best.processes} process(es), the most efficient level)",
    )
    for app_cores, db_cores in ((2, 2), (4, 4), (8, 8)):
        predicted = min(app_cores / app_per, db_cores / pg_per)
        limit = "app" if app_cores / app_per < db_cores / pg_per else "database"
        report(
            f"  model: {app_cores} app cores + {db_cores} DB cores",
            f"{predicted:,.0f} {unit}/s (limited by {limit} CPU; ignores commit latency, lock "
            "contention and network)",
        )


async def run() -> None:
    cluster = PostgresCluster()
    cluster.start(fsync="on", max_connections="300")
    try:
        postmaster = cluster.pids()[0]
        report("bench-scale", f"own Postgres cluster (fsync on), {CORES} cores shared by all")
        levels = []
        for workers in WORKERS:
            level = await workflow_level(cluster.url, postmaster, workers)
            assert level.done == RUNS, f"only {level.done} of {RUNS} runs completed"
            levels.append(level)
            report(f"3-step runs, {workers} worker(s) x {CONCURRENCY}", level.line("runs", "claim"))
        conclude("3-step runs", "runs", levels)
        pub = []
        for publishers in PUBLISHERS:
            level = await publish_level(cluster.url, postmaster, publishers)
            pub.append(level)
            report(f"publish+fan-out, {publishers} publisher(s)", level.line("events", "publish"))
        conclude("publish", "events", pub)
    finally:
        cluster.remove()
