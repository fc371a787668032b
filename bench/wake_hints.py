"""What a wake hint costs in CPU on each side, through redis-py, on this machine.

`python -m bench.wake_hints [N]` prints the CPU per PUBLISH sent through the client's pipeline (what
the wake layer's publisher avoids), through one connection's API (what it does) and over a raw
socket (the floor), then the CPU per message received through `PubSub.get_message`, with the
parser redis-py picked (hiredis when installed). Not a `make bench` suite: it informs
docs/benchmarks.md ("Wake layer").
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
from redis.utils import HIREDIS_AVAILABLE

from bench.common import REDIS_URL
from ripple.platform.core.wake import REDIS_CONNECTION_OPTIONS
from ripple.platform.ops.runner import run_process

CHANNEL = "ripple-bench:wake-hints"
#: One PUBLISH of a hint on CHANNEL as RESP bytes, for the raw-socket floor and the flood.
RAW_PUBLISH = f"*3\r\n$7\r\nPUBLISH\r\n${len(CHANNEL)}\r\n{CHANNEL}\r\n$3\r\nsrc\r\n".encode()


async def _cpu_per_call(n: int, once: Callable[[], Awaitable[object]]) -> float:
    """Microseconds of this process's CPU per call of `once`."""
    started = time.process_time()
    for _ in range(n):
        await once()
    return (time.process_time() - started) / n * 1e6


async def _senders(n: int) -> None:
    client = aioredis.Redis.from_url(REDIS_URL, health_check_interval=5, **REDIS_CONNECTION_OPTIONS)
    pool = aioredis.ConnectionPool.from_url(REDIS_URL, **REDIS_CONNECTION_OPTIONS)
    conn = await pool.get_connection()  # type: ignore[no-untyped-call]
    reader, writer = await asyncio.open_connection(*_host_port())

    async def pipeline() -> None:
        async with client.pipeline(transaction=False) as pipe:
            pipe.publish(CHANNEL, b"src")
            await pipe.execute()

    async def connection() -> None:
        await conn.send_packed_command(
            conn.pack_commands([("PUBLISH", CHANNEL, b"src")]), check_health=False
        )
        await conn.read_response()

    async def socket() -> None:
        writer.write(RAW_PUBLISH)
        await reader.readline()

    try:
        for name, once in (
            ("client pipeline", pipeline),
            ("connection", connection),
            ("raw socket", socket),
        ):
            runs = sorted([await _cpu_per_call(n, once) for _ in range(3)])
            print(f"PUBLISH via {name:<16} {runs[1]:6.1f} µs CPU (median of 3 rounds of {n})")
    finally:
        writer.close()
        await pool.release(conn)
        await pool.disconnect()
        await client.aclose()


async def _flood(n: int) -> None:
    """Publish `n` hints as fast as Redis answers (the receiving side's load)."""
    reader, writer = await asyncio.open_connection(*_host_port())
    for _ in range(n):
        writer.write(RAW_PUBLISH)
        await reader.readline()
    writer.close()


def _host_port() -> tuple[str, int]:
    kwargs = aioredis.ConnectionPool.from_url(REDIS_URL).connection_kwargs
    return str(kwargs.get("host", "127.0.0.1")), int(kwargs.get("port", 6379))


async def _receiver(n: int) -> None:
    client = aioredis.Redis.from_url(REDIS_URL, health_check_interval=5, **REDIS_CONNECTION_OPTIONS)
    pubsub = client.pubsub()
    await pubsub.subscribe(CHANNEL)
    await pubsub.get_message(timeout=1.0)  # the subscription's confirmation
    flood = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.wake_hints", "flood", str(n)
    )
    got, started = 0, None
    while got < n:
        if await pubsub.get_message(timeout=5.0) is not None:
            started = time.process_time() if started is None else started
            got += 1
    assert started is not None
    cpu = (time.process_time() - started) / (n - 1) * 1e6
    parser = "hiredis" if HIREDIS_AVAILABLE else "pure-Python RESP"
    print(f"message via PubSub.get_message {cpu:6.1f} µs CPU ({parser} parser, {n} messages)")
    await flood.wait()
    await pubsub.aclose()  # type: ignore[no-untyped-call]
    await client.aclose()


async def main(argv: list[str]) -> None:
    if argv[:1] == ["flood"]:
        await _flood(int(argv[1]))
        return
    n = int(argv[0]) if argv else 3000
    await _senders(n)
    await _receiver(n)


if __name__ == "__main__":
    run_process(main(sys.argv[1:]))
