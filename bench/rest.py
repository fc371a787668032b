"""REST benchmark: `ripple serve` (one API process) driven over keep-alive HTTP by aiohttp.

For publish (`POST /v1/topics/{topic}/events`, one queue subscription) and start
(`POST /v1/workflows/{name}/runs`): the most requests/s the process answers with CONCURRENCY
requests in flight, then p50/p99 latency of an open-loop load at half that rate (requests sent
on a fixed schedule whatever the answers do, so queueing shows in the latency).

Then the cost of a per-token rate limit: publish with a stored `publish:#` token whose limit is
never reached (each request still takes from its Redis bucket) against the same with a token
without a limit, alternated over LIMIT_ROUNDS rounds, best round of each.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp

from bench.common import BenchDb, bench_database, cpu_seconds, pct, report
from bench.publish import free_port
from ripple.platform.client import Client
from ripple.subscribers import QueueTarget, RateLimit

REQUESTS = 3000
CONCURRENCY = 32
#: Seconds of open-loop load for the latency figure.
LATENCY_SECONDS = 3.0
#: Rounds of the rate-limit comparison (each: one run with, one without a limit).
LIMIT_ROUNDS = 5


@contextlib.asynccontextmanager
async def serve(
    db: BenchDb, port: int, command: list[str] | None = None
) -> AsyncIterator[tuple[str, int]]:
    """`ripple serve` on `port` against the bench database until the block ends: (url, pid).

    `command` runs instead of the `ripple` script (bench/rest_variants.py)."""
    env = {
        **os.environ,
        "RIPPLE_DATABASE_URL": db.url,
        "RIPPLE_REDIS_URL": db.settings.redis_url or "",
        "RIPPLE_REDIS_PREFIX": db.settings.redis_prefix,
        "RIPPLE_LOG_LEVEL": "warning",
    }
    ripple = command or [str(Path(sys.executable).with_name("ripple"))]
    proc = await asyncio.create_subprocess_exec(
        *ripple,
        "serve",
        "--port",
        str(port),
        "--app",
        "bench.app",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    profile = os.environ.get("RIPPLE_BENCH_PY_SPY")  # e.g. /tmp/py-spy: profile the server
    if profile:  # py-spy stops by itself when the server exits
        await asyncio.create_subprocess_exec(
            profile,
            "record",
            "--format",
            "raw",
            "-o",
            f"/tmp/serve-{port}.txt",
            "--pid",
            str(proc.pid),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
    try:
        async with aiohttp.ClientSession() as http:
            deadline = time.monotonic() + 60
            while True:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"{url}/healthz") as response:
                        if response.status == 200:
                            break
                if time.monotonic() > deadline or proc.returncode is not None:
                    raise RuntimeError("ripple serve did not start")
                await asyncio.sleep(0.1)
        yield url, proc.pid
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 15)
            except TimeoutError:
                proc.kill()
                await proc.wait()


#: The load generator shares the machine's two cores with the server it measures, so it sends
#: bodies encoded once (`json=` encodes them on every request; docs/benchmarks.md).
_JSON = {"Content-Type": "application/json"}


async def _post(
    http: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str] = _JSON
) -> float:
    started = time.perf_counter()
    async with http.post(url, data=body, headers=headers) as response:
        await response.read()
        if response.status >= 300:
            raise RuntimeError(f"{url}: {response.status}")
    return time.perf_counter() - started


async def throughput(
    http: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str] = _JSON
) -> float:
    """Requests/s with CONCURRENCY requests in flight."""
    counter = iter(range(REQUESTS))

    async def one() -> None:
        for _ in counter:
            await _post(http, url, body, headers)

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(CONCURRENCY)))
    return REQUESTS / (time.perf_counter() - started)


async def latencies(http: aiohttp.ClientSession, url: str, body: bytes, rate: float) -> list[float]:
    """Latencies of requests sent at `rate`/s on a fixed schedule for LATENCY_SECONDS."""
    count = max(1, int(rate * LATENCY_SECONDS))
    loop = asyncio.get_running_loop()
    start = loop.time()
    tasks = []
    for n in range(count):
        delay = start + n / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(_post(http, url, body)))
    return list(await asyncio.gather(*tasks))


async def run() -> None:
    port = free_port()
    async with bench_database() as db:
        async with Client(settings=db.settings) as client:
            await client.subscribe("rest.#", QueueTarget("rest-audit"))
            free = await client.tokens.create("bench-free", scopes=["publish:#"])
            limited = await client.tokens.create(
                "bench-limited", scopes=["publish:#"], rate_limit=RateLimit(10_000_000, per=1.0)
            )
        async with (
            serve(db, port) as (url, pid),
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256)) as http,
        ):
            paths = {
                "publish": (f"{url}/v1/topics/rest.event/events", b'{"payload":{"n":1}}'),
                "start": (f"{url}/v1/workflows/one-step/runs", b"{}"),
            }
            for name, (path, body) in paths.items():
                await throughput(http, path, body)  # warm-up
                cpu = cpu_seconds(pid)
                rate = await throughput(http, path, body)
                cpu = (cpu_seconds(pid) - cpu) / REQUESTS
                lat = await latencies(http, path, body, rate / 2)
                report(
                    f"REST {name} (1 ripple serve process)",
                    f"{rate:,.0f} req/s at {CONCURRENCY} in flight ({cpu * 1000:.2f} ms API CPU "
                    f"per request); at {rate / 2:,.0f} req/s: "
                    f"p50 {pct(lat, 50) * 1000:.1f} ms, p99 {pct(lat, 99) * 1000:.1f} ms",
                )
            path, body = paths["publish"]
            rates: dict[str, list[float]] = {"free": [], "limited": []}
            cpus: dict[str, list[float]] = {"free": [], "limited": []}
            for _ in range(LIMIT_ROUNDS):
                for name, token in (("free", free), ("limited", limited)):
                    headers = {**_JSON, "Authorization": f"Bearer {token.secret}"}
                    cpu = cpu_seconds(pid)
                    rates[name].append(await throughput(http, path, body, headers))
                    cpus[name].append((cpu_seconds(pid) - cpu) / REQUESTS)
            best_free, best_limited = max(rates["free"]), max(rates["limited"])
            cpu_free, cpu_limited = min(cpus["free"]), min(cpus["limited"])
            report(
                "REST publish, token with a rate limit",
                f"{best_limited:,.0f} req/s vs {best_free:,.0f} req/s without a limit = "
                f"{best_limited / best_free:.0%}; API CPU per request {cpu_limited * 1000:.2f} "
                f"vs {cpu_free * 1000:.2f} ms = {cpu_free / cpu_limited:.0%} "
                f"(best of {LIMIT_ROUNDS} alternated rounds)",
            )
