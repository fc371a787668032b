"""CLI startup: `ripple --help` and `ripple runs list` (on a fresh, migrated database).

Each command runs RUNS times as a subprocess; printed are the median wall time and the median
CPU time (user + system) of the process, beside a bare `python -c pass` measured the same way
(the interpreter's own start, which no CLI can beat). On a shared machine the wall time moves
with other tenants' load; the CPU time much less.

`ripple runs list` is measured three ways:
- on the database (the default: the CLI calls the `Client` in its own process), with the
  bytecode `make setup` compiles;
- the same with no bytecode cache (every module compiled at start: what a process pays when
  nothing was compiled at install and PYTHONDONTWRITEBYTECODE is set, as on this machine);
- with `--api` against a running `ripple serve` (the CLI then imports httpx, no asyncpg).
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.common import bench_database, report
from bench.publish import free_port

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


def _serving(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """A `ripple serve` on a free port, once it answers /healthz."""
    url = f"http://127.0.0.1:{free_port()}"
    server = subprocess.Popen(
        [RIPPLE, "serve", "--port", url.rsplit(":", 1)[1]],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/healthz", timeout=1):
                return server, url
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError("ripple serve did not start") from None
            time.sleep(0.1)


def _remote(env: dict[str, str]) -> tuple[float, float]:
    server, url = _serving(env)
    try:
        return _time([RIPPLE, "runs", "list", "--api", url], env)
    finally:
        server.terminate()
        server.wait(timeout=30)


async def run() -> None:
    async with bench_database() as db:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RIPPLE_")}
        env["RIPPLE_DATABASE_URL"] = db.url
        await asyncio.to_thread(subprocess.run, [RIPPLE, "migrate"], env=env, check=True)
        bare = await asyncio.to_thread(_time, [sys.executable, "-c", "pass"], env)
        helped = await asyncio.to_thread(_time, [RIPPLE, "--help"], env)
        listed = await asyncio.to_thread(_time, [RIPPLE, "runs", "list"], env)
        with tempfile.TemporaryDirectory() as empty:
            # Bytecode is looked up (and, with the variable unset, written) under an empty
            # folder: nothing is found, nothing kept, every module compiled on every run.
            cold_env = env | {"PYTHONPYCACHEPREFIX": empty, "PYTHONDONTWRITEBYTECODE": "1"}
            cold = await asyncio.to_thread(_time, [RIPPLE, "runs", "list"], cold_env)
        remote = await asyncio.to_thread(_remote, env)
    _line("cli: ripple --help", helped, bare)
    _line("cli: ripple runs list (database)", listed, bare)
    _line("cli: runs list (database, no bytecode)", cold, bare)
    _line("cli: runs list --api (ripple serve)", remote, bare)
