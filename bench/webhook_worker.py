"""Webhook benchmark processes, each run as `ripple worker` runs its loops: uvloop through
`run_process`, the startup objects frozen out of the garbage collector's view.

`python -m bench.webhook_worker ripple` delivers every due webhook delivery of the database in
the RIPPLE_* environment with one `WebhookDispatcher`; `python -m bench.webhook_worker bare URL
CONCURRENCY POSTS` POSTs signed JSON to URL with bare aiohttp. Each prints `ready` once set up,
then `<deliveries> <seconds> <cpu seconds> <gc collections>` for the work alone, and exits.
"""

from __future__ import annotations

import gc
import sys
import time

from bench.bare_http import aiohttp_posts
from ripple.platform.client import Client
from ripple.platform.core.logs import configure_logging
from ripple.platform.ops.runner import freeze_startup_objects, run_process


async def ripple() -> None:
    async with Client() as client:
        dispatcher = client.background_services(webhooks=True, sweeper=False)[0]
        freeze_startup_objects()
        print("ready", flush=True)
        started, cpu, collections = time.perf_counter(), time.process_time(), _collections()
        made = await dispatcher.run_until_idle()  # type: ignore[attr-defined]
        elapsed, used = time.perf_counter() - started, time.process_time() - cpu
        print(made, elapsed, used, _collections() - collections, flush=True)


async def bare(url: str, concurrency: int, posts: int) -> None:
    freeze_startup_objects()
    print("ready", flush=True)
    cpu, collections = time.process_time(), _collections()
    rate = await aiohttp_posts(url, concurrency, posts)
    used = time.process_time() - cpu
    print(posts, posts / rate, used, _collections() - collections, flush=True)


def _collections() -> int:
    """Collections of the cyclic GC so far, all generations (they run on the loop's thread)."""
    return sum(generation["collections"] for generation in gc.get_stats())


if __name__ == "__main__":
    configure_logging(level="warning")
    if sys.argv[1] == "ripple":
        run_process(ripple())
    else:
        run_process(bare(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
