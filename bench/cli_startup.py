"""CLI startup: `ripple --help` and `ripple runs list` (on a fresh, migrated database).

Each command runs RUNS times as a subprocess; printed are the median wall time and the median
CPU time (user + system) of the process, beside a bare `python -c pass` measured the same way
(the interpreter's own start, which no CLI can beat). On a shared machine the wall time moves
with other tenants' load; the CPU time much less.
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.common import bench_database, report

RUNS = 7
RIPPLE = str(Path(sys.executable).parent / "ripple")


def _time(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Median (wall seconds, CPU seconds) of running `args` RUNS times."""
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(RUNS):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(args, env=env, check=True, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(
            after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime,
        )
    return statistics.median(walls), statistics.median(cpus)


def _line(name: str, figure: tuple[float, float], bare: tuple[float, float]) -> None:
    wall, cpu = figure
    report(
        name,
        f"{wall * 1000:,.0f} ms wall, {cpu * 1000:,.0f} ms CPU (median of {RUNS}; bare python "
        f"{bare[0] * 1000:,.0f} ms wall, {bare[1] * 1000:,.0f} ms CPU)",
    )


async def run() -> None:
    async with bench_database() as db:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RIPPLE_")}
        env["RIPPLE_DATABASE_URL"] = db.url
        await asyncio.to_thread(subprocess.run, [RIPPLE, "migrate"], env=env, check=True)
        bare = await asyncio.to_thread(_time, [sys.executable, "-c", "pass"], env)
        helped = await asyncio.to_thread(_time, [RIPPLE, "--help"], env)
        listed = await asyncio.to_thread(_time, [RIPPLE, "runs", "list"], env)
    _line("cli: ripple --help", helped, bare)
    _line("cli: ripple runs list (database)", listed, bare)
