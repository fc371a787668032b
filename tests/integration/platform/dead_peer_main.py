"""The client side of the black-hole test, run inside a network namespace of the test's own.

`python -m tests.integration.platform.dead_peer_main URL LEASE` opens three connections to URL:
`guarded` (idle) and `busy` through `_connect_each` with the lease's dead-peer options, `plain`
with asyncpg's defaults. It prints `ready`, waits for a line on stdin (the black hole is in
place), then sends a statement on `busy` and waits for `guarded` to close, printing what
happened to each: `busy failed <error>`, `idle closed`, `plain open|closed`.
"""

from __future__ import annotations

import asyncio
import sys

import asyncpg

from ripple.platform.core.db import _connect_each


async def main(url: str, lease: float) -> None:
    guarded = await _connect_each(url, timeout=10, dead_peer_after=lease)
    busy = await _connect_each(url, timeout=10, dead_peer_after=lease)
    plain = await asyncpg.connect(url, timeout=10)
    for conn in (guarded, busy, plain):
        await conn.fetchval("SELECT 1")
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    try:
        await busy.fetchval("SELECT 1")  # sent into the void; no statement timeout
        print("busy answered", flush=True)
    except (OSError, asyncpg.PostgresConnectionError, asyncpg.InterfaceError) as exc:
        print(f"busy failed {type(exc).__name__}", flush=True)
    while not guarded.is_closed():  # noqa: ASYNC110 - the kernel closes it, no event to await
        await asyncio.sleep(0.05)
    print("idle closed", flush=True)
    print("plain " + ("closed" if plain.is_closed() else "open"), flush=True)
    plain.terminate()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2])))
