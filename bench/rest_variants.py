"""REST publish through `ripple serve` on each HTTP parser and event loop, side by side.

python -m bench.rest_variants [ROUNDS]: for uvicorn's h11/httptools x asyncio/uvloop, and the
product's setup (`ripple`: its bounded httptools protocol on uvloop), requests/s with
bench/rest.py's load and the API process's CPU per request, interleaved over ROUNDS rounds
(one calibration for all). Not a `make bench` suite: it informs the choice in
ripple.platform.processes.server.
"""

from __future__ import annotations

import asyncio
import sys

import aiohttp

from bench.__main__ import cpu_calibration
from bench.common import bench_database, cpu_seconds
from bench.publish import free_port
from bench.rest import REQUESTS, serve, throughput
from ripple.platform.client import Client
from ripple.subscribers import QueueTarget

VARIANTS = [
    *((http, loop) for loop in ("asyncio", "uvloop") for http in ("h11", "httptools")),
    ("ripple", "uvloop"),
]


async def run(rounds: int) -> None:
    async with bench_database() as db:
        async with Client(settings=db.settings) as client:
            await client.subscribe("rest.#", QueueTarget("rest-audit"))
        for n in range(rounds):
            for http, loop in VARIANTS:
                command = [sys.executable, "-m", "bench.serve_variant", http, loop]
                async with (
                    serve(db, free_port(), command) as (url, pid),
                    aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=256)) as session,
                ):
                    path = f"{url}/v1/topics/rest.event/events"
                    body = b'{"payload":{"n":1}}'
                    await throughput(session, path, body)  # warm-up
                    cpu = cpu_seconds(pid)
                    rate = await throughput(session, path, body)
                    cpu = (cpu_seconds(pid) - cpu) / REQUESTS
                print(
                    f"round {n} {http:<9} {loop:<7} publish {rate:7,.0f} req/s "
                    f"({cpu * 1000:.2f} ms API CPU per request)",
                    flush=True,
                )


def main() -> None:
    print(f"# cpu {cpu_calibration()}", flush=True)
    asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 2))
    print(f"# cpu after: {cpu_calibration()}", flush=True)


if __name__ == "__main__":
    main()
