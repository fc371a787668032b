"""The event payload index's price on publish: server time per event of inserting events into
the search suite's seeded `ripple_events` (10M rows by default) without the index, with it as
migrated (pending list on, 1 MB), and with its pending list off.

Each trial inserts BATCHES statements of SIZE events (the publish benchmark's payload shape)
in one transaction that is rolled back; a variant's `DROP INDEX` or `ALTER INDEX` is made in
that transaction and rolled back with it. Variants rotate order each round.

    RIPPLE_BENCH_SEARCH_KEEP=name python -m bench --only event_index
"""

from __future__ import annotations

import statistics
import time

import asyncpg

from bench.common import report
from bench.search import search_database

ROUNDS = 6
BATCHES = 100
SIZE = 200
VARIANTS: dict[str, str | None] = {
    "without the payload index": "DROP INDEX ripple_events_payload",
    "as migrated (pending list on, 1 MB)": None,
    "pending list off": "ALTER INDEX ripple_events_payload SET (fastupdate = off)",
}
# $1 first n, $2 count
INSERT = """
INSERT INTO ripple_events (id, topic, payload)
SELECT gen_random_uuid(), 'bench.event',
       jsonb_build_object('n', $1 + i, 'user', jsonb_build_object('id', $1 + i, 'plan', 'pro'))
FROM generate_series(1, $2) AS i
"""


async def _trial(conn: asyncpg.Connection, change: str | None, first: int) -> float:
    """Microseconds per event inserted."""
    tx = conn.transaction()
    await tx.start()
    try:
        if change is not None:
            await conn.execute(change)
        started = time.perf_counter()
        for batch in range(BATCHES):
            await conn.execute(INSERT, first + batch * SIZE, SIZE)
        return (time.perf_counter() - started) / (BATCHES * SIZE) * 1e6
    finally:
        await tx.rollback()


async def run() -> None:
    async with search_database() as (_, url, fresh):
        if fresh:
            raise SystemExit("seed the search database first: python -m bench --only search")
        conn = await asyncpg.connect(url)
        try:
            names = list(VARIANTS)
            micros: dict[str, list[float]] = {name: [] for name in names}
            for r in range(ROUNDS):
                for name in names[r % len(names) :] + names[: r % len(names)]:
                    first = 1_000_000_000 + (r * len(names) + len(micros[name])) * BATCHES * SIZE
                    micros[name].append(await _trial(conn, VARIANTS[name], first))
            # Rolled-back inserts leave their keys in the pending list: merge them now.
            await conn.execute("SELECT gin_clean_pending_list('ripple_events_payload')")
        finally:
            await conn.close()
    base = statistics.median(micros[names[0]])
    report(
        "insert into ripple_events, server time",
        f"{ROUNDS} rounds of {BATCHES} x {SIZE} events, median per event",
    )
    for name in names:
        median = statistics.median(micros[name])
        report(f"  {name}", f"{median:.1f} us/event ({median - base:+.1f} us)")
