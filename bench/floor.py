"""The bare floor of a run's latency on this machine: its round trips and hops done without Ripple.

python -m bench.floor [N]: p50 over N tries of a `SELECT 1` round trip, an autocommit INSERT (a
round trip and a WAL flush), BEGIN/INSERT/COMMIT, and a Redis publish reaching a subscriber.
A 1-step run's start→result chains an insert, a hint, a claim, a completion, a hint and a read;
these add up to what no code on top can go below. Not a `make bench` suite: it informs
docs/benchmarks.md ("Where a workflow run's time goes").
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable

import asyncpg
import redis.asyncio as aioredis

from bench.__main__ import cpu_calibration
from bench.common import REDIS_URL, bench_database


async def _p50(tries: int, once: Callable[[], Awaitable[object]]) -> float:
    samples = []
    for _ in range(tries):
        started = time.perf_counter()
        await once()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


async def run(tries: int) -> None:
    async with bench_database() as db:
        conn = await asyncpg.connect(db.url)
        try:
            await conn.execute("CREATE TABLE floor (id serial PRIMARY KEY, v int)")

            async def transaction() -> None:
                async with conn.transaction():
                    await conn.execute("INSERT INTO floor (v) VALUES (1)")

            figures = {
                "SELECT 1 round trip": await _p50(tries, lambda: conn.fetchval("SELECT 1")),
                "autocommit INSERT (round trip + WAL flush)": await _p50(
                    tries, lambda: conn.execute("INSERT INTO floor (v) VALUES (1)")
                ),
                "BEGIN/INSERT/COMMIT": await _p50(tries, transaction),
            }
        finally:
            await conn.close()
    publisher = aioredis.Redis.from_url(REDIS_URL)
    subscriber = aioredis.Redis.from_url(REDIS_URL)
    pubsub = subscriber.pubsub()
    try:
        await pubsub.subscribe("ripple-bench-floor")
        await pubsub.get_message(timeout=1)  # the subscribe confirmation

        async def hop() -> None:
            await publisher.publish("ripple-bench-floor", b"x")
            while True:
                message = await pubsub.get_message(timeout=1)
                if message is not None and message["type"] == "message":
                    return

        figures["Redis publish reaching a subscriber"] = await _p50(tries, hop)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
        await subscriber.aclose()
        await publisher.aclose()
    for name, p50 in figures.items():
        print(f"{name:<45} p50 {p50:.3f} ms", flush=True)


def main() -> None:
    print(f"# cpu {cpu_calibration()}", flush=True)
    asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 400))
    print(f"# cpu after: {cpu_calibration()}", flush=True)


if __name__ == "__main__":
    main()
