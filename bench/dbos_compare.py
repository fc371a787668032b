"""DBOS Transact on the same local Postgres, measured like `make bench` measures Ripple.

`make bench-dbos` runs this in an ephemeral environment (`uv run --no-project --with dbos
--with asyncpg`), so the project never depends on dbos. It imports nothing from Ripple; the
percentile and report helpers mirror `bench/common.py` so the lines compare one to one.

Measured, each on a fresh database:
- throughput of 2,000 runs of a 3-step no-op workflow (started 100 at a time, all awaited);
- start→result latency over 200 sequential 1-step runs (after 20 warm-up runs);
- send→recv→result latency over 200 workflows blocked in `recv`.

DBOS executes a workflow in the process that starts it (its normal embedded model), so unlike
Ripple's numbers no second process and no cross-process wake-up is involved.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import os
import platform
import statistics
import time
import uuid
from collections.abc import Sequence
from urllib.parse import urlsplit, urlunsplit

import asyncpg
from dbos import DBOS, DBOSConfig

PG_URL = os.environ.get("RIPPLE_BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
RUNS = 2000
LATENCY_RUNS = 200
WAITS = 200


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def pct(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of values, by nearest rank (as bench/common.py)."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


def summary(values: Sequence[float], unit: float = 1000.0) -> str:
    return (
        f"p50 {pct(values, 50) * unit:.2f} ms, p99 {pct(values, 99) * unit:.2f} ms, "
        f"mean {statistics.fmean(values) * unit:.2f} ms, max {max(values) * unit:.2f} ms "
        f"(n={len(values)})"
    )


def report(name: str, text: str) -> None:
    print(f"{name:<44} {text}", flush=True)


# -- the workflows ----------------------------------------------------------------------------


@DBOS.step()
async def noop() -> None:
    return None


@DBOS.workflow()
async def noop3() -> None:
    await noop()
    await noop()
    await noop()


@DBOS.workflow()
async def one_step() -> None:
    await noop()


@DBOS.workflow()
async def waiter() -> object:
    await DBOS.set_event_async("waiting", True)
    return await DBOS.recv_async("go", timeout_seconds=60)


# -- plumbing ---------------------------------------------------------------------------------


async def _admin(statement: str) -> None:
    conn = await asyncpg.connect(PG_URL)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def _write_xacts() -> int:
    """The cluster's transaction id counter (see bench/common.py `write_xacts`)."""
    conn = await asyncpg.connect(PG_URL)
    try:
        return int(await conn.fetchval("SELECT pg_current_xact_id()::text::bigint"))
    finally:
        await conn.close()


class FreshDbos:
    """A fresh database with DBOS launched on it; destroyed and dropped on exit."""

    def __init__(self) -> None:
        self.name = f"dbos_bench_{uuid.uuid4().hex[:10]}"

    async def __aenter__(self) -> FreshDbos:
        await _admin(f'CREATE DATABASE "{self.name}"')
        config: DBOSConfig = {
            "name": "ripple-compare",
            "system_database_url": with_database(PG_URL, self.name),
            "log_level": "WARNING",
        }
        DBOS(config=config)
        DBOS.launch()
        return self

    async def __aexit__(self, *exc: object) -> None:
        DBOS.destroy()
        await _admin(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


# -- the measurements -------------------------------------------------------------------------


async def throughput() -> None:
    async with FreshDbos():
        for _ in range(20):
            await (await DBOS.start_workflow_async(noop3)).get_result()
        before = await _write_xacts()
        started = time.perf_counter()
        handles = []
        for batch in range(0, RUNS, 100):
            handles += await asyncio.gather(
                *(DBOS.start_workflow_async(noop3) for _ in range(batch, min(RUNS, batch + 100)))
            )
        await asyncio.gather(*(h.get_result() for h in handles))
        elapsed = time.perf_counter() - started
        after = await _write_xacts()
    report(
        "dbos workflow throughput (3-step no-op)",
        f"{RUNS / elapsed:,.0f} runs/s ({RUNS} runs in {elapsed:.2f} s, in-process)",
    )
    report("  db write transactions per run", f"{(after - before - 1) / RUNS:.2f} (start included)")


async def latency() -> None:
    async with FreshDbos():
        for _ in range(20):
            await (await DBOS.start_workflow_async(one_step)).get_result()
        samples = []
        for _ in range(LATENCY_RUNS):
            t0 = time.perf_counter()
            handle = await DBOS.start_workflow_async(one_step)
            await handle.get_result()
            samples.append(time.perf_counter() - t0)
    report("dbos start→result latency (1 step)", summary(samples))


async def send_recv() -> None:
    async with FreshDbos():
        handles = [await DBOS.start_workflow_async(waiter) for _ in range(WAITS)]
        for handle in handles:  # every waiter is about to block in recv
            await DBOS.get_event_async(handle.get_workflow_id(), "waiting", timeout_seconds=60)
        samples = []
        for i, handle in enumerate(handles):
            t0 = time.perf_counter()
            await DBOS.send_async(handle.get_workflow_id(), {"key": i}, "go")
            await handle.get_result()
            samples.append(time.perf_counter() - t0)
    report("dbos send→recv→result latency", summary(samples))


async def main() -> None:
    version = importlib.metadata.version("dbos")
    print(
        f"# dbos {version} on {platform.node()}: {os.cpu_count()} cores, python "
        f"{platform.python_version()}",
        flush=True,
    )
    await throughput()
    await latency()
    await send_recv()


if __name__ == "__main__":
    asyncio.run(main())
