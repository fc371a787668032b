"""Benchmark plumbing: a fresh database, worker subprocesses, percentiles, transaction counts."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import statistics
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from ripple.platform.core.config import Settings, load_settings

PG_URL = os.environ.get("RIPPLE_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("RIPPLE_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@dataclass
class BenchDb:
    url: str
    name: str
    settings: Settings


@contextlib.asynccontextmanager
async def bench_database(pg_url: str = PG_URL, **overrides: object) -> AsyncIterator[BenchDb]:
    """A fresh database on the server of `pg_url` (dropped afterwards) and settings for it."""
    name = f"ripple_bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pg_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = with_database(pg_url, name)
    settings = load_settings(
        database_url=url,
        redis_url=REDIS_URL,
        redis_prefix=f"bench{uuid.uuid4().hex[:6]}:",
        **overrides,
    )
    try:
        yield BenchDb(url, name, settings)
    finally:
        admin = await asyncpg.connect(pg_url)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


async def write_xacts(pg_url: str = PG_URL) -> int:
    """Write transactions the cluster has started so far: its transaction id counter.

    Every transaction that writes is assigned an id when it first writes (read-only ones are
    not), so the difference of two readings counts write transactions exactly and at once
    (pg_stat_database's commit counters lag by up to seconds and count every read too). Each
    reading consumes one id itself; other databases' writes during the window count as well,
    so benchmarks run on a quiet server.
    """
    conn = await asyncpg.connect(pg_url)
    try:
        return int(await conn.fetchval("SELECT pg_current_xact_id()::text::bigint"))
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def subprocess_module(
    module: str, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """Run `python -m module args` until the block ends (SIGTERM, then SIGKILL)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        module,
        *args,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 60)
        if b"ready" not in line:
            raise RuntimeError(f"{module} did not start: {line!r}")
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    # After the command name: fields[11] is utime, fields[12] stime, in clock ticks.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of values, by nearest rank."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


def summary(values: Sequence[float], unit: float = 1000.0) -> str:
    """p50/p99/max in milliseconds by default."""
    return (
        f"p50 {pct(values, 50) * unit:.2f} ms, p99 {pct(values, 99) * unit:.2f} ms, "
        f"mean {statistics.fmean(values) * unit:.2f} ms, max {max(values) * unit:.2f} ms "
        f"(n={len(values)})"
    )


def report(name: str, text: str) -> None:
    print(f"{name:<44} {text}", flush=True)


def report_vs(name: str, figure: float, baseline: float, unit: str, detail: str = "") -> None:
    """A figure with its bare baseline (same work, same library, no Ripple) and the ratio."""
    extra = f"; {detail}" if detail else ""
    report(
        name,
        f"{figure:,.0f} {unit} vs bare {baseline:,.0f} {unit} = {figure / baseline:.0%}{extra}",
    )


def postgres_cpu_seconds(postmaster: int | None) -> float:
    """CPU seconds the Postgres server of `postmaster` has used so far: the postmaster's own,
    its reaped children's (cutime + cstime: backends that have exited) and those of every live
    child (backends, walwriter, checkpointer...), from /proc. NaN when it is unknown (None: a
    server that is not local)."""
    if postmaster is None:
        return float("nan")
    try:
        fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    ticks = sum(int(f) for f in fields[11:15])
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            child = stat.read_text().rsplit(")", 1)[1].split()
            if int(child[1]) == postmaster:
                ticks += int(child[11]) + int(child[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def parent_pid(pid: int) -> int | None:
    """The parent of process `pid` (for a Postgres backend of a local server: the
    postmaster), or None when /proc cannot tell."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, from /proc/stat: tells a level
    limited by its own processes from one squeezed by other tenants of a shared machine."""
    try:
        fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return float("nan"), float("nan")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    tick = os.sysconf("SC_CLK_TCK")
    return (sum(fields[:8]) - idle) / tick, sum(fields[:8]) / tick
