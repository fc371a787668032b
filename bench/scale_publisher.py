"""A bench publisher process: `python -m bench.scale_publisher EVENTS TASKS`.

Connects, prints `ready`, waits for a line on stdin, publishes EVENTS events to `scale.event`
from TASKS concurrent tasks, then prints one JSON line: every publish's latency and the CPU
seconds it used.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from ripple.platform.client import Client
from ripple.platform.core.logs import configure_logging


async def main(events: int, tasks: int) -> None:
    configure_logging(level="warning")
    async with Client() as client:
        await client.publish("scale.warmup", {"n": -1})
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        cpu = time.process_time()
        latencies: list[float] = []
        counter = iter(range(events))

        async def publisher() -> None:
            for n in counter:
                started = time.perf_counter()
                await client.publish("scale.event", {"n": n, "user": {"id": n}})
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(publisher() for _ in range(tasks)))
        cpu = time.process_time() - cpu
    print(json.dumps({"publishes": latencies, "cpu": [cpu]}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2])))
