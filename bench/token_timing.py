"""How long the API takes to refuse a wrong bearer token, by the shape of the presented string.

`Access.principal` in process against a fresh database (the same steps a request's auth
runs), ROUNDS fresh random strings of each kind, interleaved: a wrong token with the `rpl_`
prefix, a wrong prefix of the same length, and a short string with no prefix. Printed: the
median, p10 and p90 of each; the kinds should be within each other's noise.

    python -m bench.token_timing
"""

from __future__ import annotations

import asyncio
import secrets
import statistics
import time
from collections.abc import Callable

from bench.common import bench_database, pct, report
from ripple.platform.api.access import Access
from ripple.platform.client import Client
from ripple.platform.core.logs import configure_logging

ROUNDS = 2000

KINDS: dict[str, Callable[[], str]] = {
    "wrong token, rpl_ prefix": lambda: "rpl_" + secrets.token_urlsafe(32),
    "wrong prefix (xyz_)": lambda: "xyz_" + secrets.token_urlsafe(32),
    "no prefix, 11 chars": lambda: secrets.token_urlsafe(8),
}


async def run() -> None:
    async with bench_database(pool_max_size=4) as db, Client(settings=db.settings) as client:
        access = Access(client, [secrets.token_urlsafe(32)])
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for _ in range(ROUNDS):
            for kind, make in KINDS.items():
                presented = make()
                started = time.perf_counter()
                assert await access.principal(presented) is None
                times[kind].append((time.perf_counter() - started) * 1e6)
        for kind, values in times.items():
            report(
                f"refuse: {kind}",
                f"median {statistics.median(values):,.0f} µs, p10 {pct(values, 10):,.0f} µs, "
                f"p90 {pct(values, 90):,.0f} µs ({ROUNDS} strings)",
            )


if __name__ == "__main__":
    configure_logging(level="warning")
    asyncio.run(run())
