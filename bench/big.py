"""`make bench-big`: Ripple on big tables, and retention by partition drop against DELETE.

Seeds (generate_series SQL, on a Postgres cluster of its own so WAL and timings are the
benchmark's alone) RIPPLE_BIG_EVENTS events spread over 8 days, RIPPLE_BIG_RUNS completed runs
over 40 days and RIPPLE_BIG_STEPS journal rows among them (defaults 10M / 1M / 10M; seeding
that much takes long on a small machine: measure smaller first). The event table is laid out
as an installation partitioned daily for 9 days, so the events land in day partitions. Then
measures, with fsync on: claim latency (claims among 2,000 pending runs), publish latency
(fan-out to a queue), list pages (first and 10th page of runs), and retention: the sweeper's
partition retirement (the day partitions older than 7 days, detached and dropped), then the
same events deleted by the sweeper's former batch DELETE from an unpartitioned copy of the
whole event table with the same indexes, and runs past 30 days with their journals by the
sweeper's DELETE: time and WAL bytes (`pg_current_wal_lsn()` before and after).
"""

from __future__ import annotations

import asyncio
import functools
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from bench.common import bench_database, report, summary
from ripple.platform.client import Client
from ripple.platform.ops.partitions import Partitions
from ripple.subscribers import QueueTarget
from ripple.workflows import store
from tests.helpers import partitioned_since
from tests.servers import PostgresCluster

EVENTS = int(os.environ.get("RIPPLE_BIG_EVENTS", "10000000"))
RUNS = int(os.environ.get("RIPPLE_BIG_RUNS", "1000000"))
STEPS = int(os.environ.get("RIPPLE_BIG_STEPS", "10000000"))
DAY = 86_400.0

# A time-ordered uuid (48-bit millisecond prefix, like uuid7) of timestamp $ts for row $g.
_UUID = "(lpad(to_hex((extract(epoch FROM {ts}) * 1000)::bigint), 12, '0') || '7' || substr(md5({g}::text), 1, 19))::uuid"  # noqa: E501

SEED_EVENTS = f"""
INSERT INTO ripple_events (id, topic, payload, created_at, subscriptions_version)
SELECT {_UUID.format(ts="t", g="g")}, 'big.t' || (g % 50),
       jsonb_build_object('n', g, 'user', jsonb_build_object('id', g % 100000)), t, 1
FROM generate_series(1, $1::bigint) AS g,
     LATERAL (SELECT now() - interval '8 days' + (g::float8 / $1) * interval '8 days') AS x(t)
"""
# Run g: created over the last 40 days, completed a second later.
# $3 is one timestamp for both statements, so a journal row's run id is its run's.
_RUN_TIME = "$3::timestamptz - interval '40 days' + ({g}::float8 / $1) * interval '40 days'"
SEED_RUNS = f"""
INSERT INTO ripple_runs (run_id, workflow, version, status, output, attempt, step_count,
                         created_at, started_at, completed_at, updated_at)
SELECT {_UUID.format(ts=_RUN_TIME.format(g="g"), g="g")}::text, 'noop3', 1, 'completed',
       'null'::jsonb, 1, $2, t, t, t + interval '1 second', t + interval '1 second'
FROM generate_series(1, $1::bigint) AS g,
     LATERAL (SELECT {_RUN_TIME.format(g="g")}) AS x(t)
"""
SEED_STEPS = f"""
INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, output, started_at,
                          completed_at)
SELECT {_UUID.format(ts=_RUN_TIME.format(g="r"), g="r")}::text, 's' || k, k, 'step',
       'completed', 1, '{{"ok": true}}'::jsonb, now(), now()
FROM generate_series(1, $1::bigint) AS r, generate_series(1, $2::int) AS k
"""
# Today's unpartitioned event table, for the DELETE side of the comparison.
FLAT = """
CREATE TABLE big_events_flat (LIKE ripple_events INCLUDING DEFAULTS INCLUDING INDEXES)
"""
# The sweeper's batch DELETE of events before partitions: $1 cutoff, $2 batch size.
DELETE_FLAT = """
WITH doomed AS (
    SELECT id FROM big_events_flat WHERE created_at < $1 ORDER BY created_at LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM big_events_flat e USING doomed d WHERE e.id = d.id
"""


async def _wal(conn: asyncpg.Connection[Any]) -> str:
    return str(await conn.fetchval("SELECT pg_current_wal_lsn()::text"))


async def _measured(
    conn: asyncpg.Connection[Any], work: Callable[[], Awaitable[int]]
) -> tuple[int, float, int]:
    """Rows `work` reports, its seconds, and the WAL bytes written meanwhile (after a
    checkpoint, so both sides pay the first-touch full-page images)."""
    await conn.execute("CHECKPOINT")
    start = await _wal(conn)
    t0 = time.perf_counter()
    rows = await work()
    elapsed = time.perf_counter() - t0
    wal = await conn.fetchval(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::text::pg_lsn)", start
    )
    return rows, elapsed, int(wal)


async def _timed(call: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - t0)
    return samples


async def seed(conn: asyncpg.Connection[Any]) -> None:
    per_run = max(1, STEPS // max(RUNS, 1))
    anchor = datetime.now(UTC)
    for label, sql, args in (
        ("events", SEED_EVENTS, (EVENTS,)),
        ("runs", SEED_RUNS, (RUNS, per_run, anchor)),
        ("journal rows", SEED_STEPS, (RUNS, per_run, anchor)),
    ):
        t0 = time.perf_counter()
        await conn.execute(sql, *args, timeout=None)
        report(f"  seeded {label}", f"in {time.perf_counter() - t0:,.0f} s")
    await conn.execute("VACUUM ANALYZE", timeout=None)
    size = await conn.fetchval("SELECT pg_size_pretty(pg_database_size(current_database()))")
    report("  database size", str(size))


# The day-window searches measured on both layouts (label, topic, payload filter): a value
# one event in 100,000 holds (a dozen in the window), a topic alone (the page fills at once),
# and a value no event holds.
SEARCHES: tuple[tuple[str, str | None, dict[str, Any] | None], ...] = (
    ("rare value", None, {"user": {"id": 4242}}),
    ("topic only", "big.t3", None),
    ("no match", None, {"user": {"id": -1}}),
)
SWAP = """
ALTER TABLE ripple_events RENAME TO big_events_swap;
ALTER TABLE big_events_flat RENAME TO ripple_events;
ALTER TABLE big_events_swap RENAME TO big_events_flat;
"""


async def _events_side_by_side(client: Client, conn: asyncpg.Connection[Any], first: int) -> None:
    """Publish latency and day-window event searches on the partitioned event table, then on
    the unpartitioned copy swapped in under its name (no foreign key points at events), then
    swapped back."""
    n = iter(range(first, 10**9))
    day = datetime.now(UTC) - timedelta(days=3, hours=12)
    figures: dict[str, dict[str, list[float]]] = {}
    for layout in ("partitioned", "unpartitioned"):
        if layout == "unpartitioned":
            await conn.execute(SWAP)
        figures[layout] = {
            "publish": await _timed(lambda: client.publish("big.t1", {"n": next(n)}), 200)
        }
        for label, topic, where in SEARCHES:
            search = functools.partial(
                client.list_events,
                topic,
                since=day,
                until=day + timedelta(days=1),
                where=where,
                limit=50,
            )
            figures[layout][label] = await _timed(search, 20)
    await conn.execute(SWAP)
    for measure_name in ("publish", *(label for label, _, _ in SEARCHES)):
        name = "publish latency" if measure_name == "publish" else f"day search, {measure_name}"
        report(
            f"{name}: partitioned vs unpartitioned",
            f"p50 {statistics.median(figures['partitioned'][measure_name]) * 1000:,.2f} vs "
            f"{statistics.median(figures['unpartitioned'][measure_name]) * 1000:,.2f} ms, "
            f"p95 {_p95(figures['partitioned'][measure_name]) * 1000:,.2f} vs "
            f"{_p95(figures['unpartitioned'][measure_name]) * 1000:,.2f} ms",
        )


def _p95(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]


async def measure(client: Client, conn: asyncpg.Connection[Any]) -> None:
    await client.subscribe("big.#", QueueTarget("big-audit"))
    for batch in range(20):
        await asyncio.gather(*(client.start("noop3", {"b": batch}) for _ in range(100)))
    pairs = [("noop3", 1)]
    claims = await _timed(
        lambda: store.claim_runs(conn, worker_id="bench", lease=30.0, limit=10, pairs=pairs), 150
    )
    report("claim latency (10 of 2,000 pending)", summary(claims))
    n = iter(range(10**9))
    publishes = await _timed(lambda: client.publish("big.t1", {"n": next(n)}), 200)
    report("publish latency (fan-out to a queue)", summary(publishes))
    first = await _timed(lambda: client.list_runs("noop3", limit=50), 30)
    report("list runs, first page of 50", summary(first))
    cursor = None
    for _ in range(9):
        cursor = (await client.list_runs("noop3", limit=50, cursor=cursor)).next_cursor
    tenth = await _timed(lambda: client.list_runs("noop3", limit=50, cursor=cursor), 30)
    report("list runs, 10th page of 50", summary(tenth))
    failed = await _timed(lambda: client.list_runs(status="failed", limit=50), 10)
    report("list runs by status with no match", summary(failed))

    # Today's unpartitioned table with the same rows (not timed): what DELETE retires from,
    # and what publish and event search are compared against.
    await conn.execute(FLAT)
    await conn.execute("INSERT INTO big_events_flat SELECT * FROM ripple_events", timeout=None)
    await conn.execute("VACUUM ANALYZE big_events_flat", timeout=None)
    await _events_side_by_side(client, conn, next(n))
    partitions = Partitions(client.pool, client.settings)

    async def retire_partitions() -> int:
        return (await partitions.retire(7 * DAY, 500))["events"]

    rows, took, wal = await _measured(conn, retire_partitions)
    report(
        "retention sweep: events by partition drop",
        f"{rows:,} rows in {took:,.2f} s, WAL {wal / 2**10:,.1f} KiB",
    )
    # The events the drop retired: those before the oldest partition left.
    bound = await conn.fetchval(
        "SELECT min(lower) FROM ripple_partitions WHERE parent = 'ripple_events'"
    )

    async def delete_events() -> int:
        total = 0
        while True:
            status = await conn.execute(DELETE_FLAT, bound, 500)
            deleted = int(status.rsplit(" ", 1)[-1])
            total += deleted
            if deleted < 500:
                return total

    rows, took, wal = await _measured(conn, delete_events)
    report(
        "retention sweep: same events by DELETE (unpartitioned)",
        f"{rows:,} rows in {took:,.1f} s, WAL {wal / 2**20:,.1f} MiB "
        f"({wal / max(rows, 1):,.0f} B/row), batches of 500",
    )

    async def sweep_runs() -> int:
        total = 0
        while True:
            counts, more = await store.RunUpkeep().delete_expired_runs(
                conn,
                max_retention=90 * DAY,
                default_retention=30 * DAY,
                batch=500,
                journal_budget=5000,
            )
            total += counts["runs"] + counts["steps"]
            if not more:
                return total

    rows, took, wal = await _measured(conn, sweep_runs)
    report(
        "retention sweep: runs + journals by DELETE",
        f"{rows:,} rows in {took:,.1f} s, WAL {wal / 2**20:,.1f} MiB "
        f"({wal / max(rows, 1):,.0f} B/row)",
    )


async def run() -> None:
    cluster = PostgresCluster()
    cluster.start(shared_buffers="256MB", max_wal_size="8GB", checkpoint_timeout="30min")
    try:
        report("bench-big", f"{EVENTS:,} events, {RUNS:,} runs, {STEPS:,} journal rows")
        async with (
            bench_database(cluster.url, db_timeout=3600.0) as db,
            Client(settings=db.settings) as client,
        ):
            conn = await asyncpg.connect(db.url)
            try:
                midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
                await partitioned_since(conn, midnight - timedelta(days=9))
                await seed(conn)
                await conn.execute("ALTER SYSTEM SET fsync = on")
                await conn.execute("SELECT pg_reload_conf()")
                await measure(client, conn)
            finally:
                await conn.close()
    finally:
        cluster.remove()
