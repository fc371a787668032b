"""Search latencies over a large seeded database: runs by search attributes
(`list_runs(where=...)`) and events by payload (`list_events(where=...)`).

Seeds RIPPLE_BENCH_SEARCH_RUNS runs (default 1,000,000), each with two attributes (a
`customer` of 1,000 and a numeric `amount`), and RIPPLE_BENCH_SEARCH_EVENTS events (default
10,000,000) over the last week, by SQL; then times each query REQUESTS times through the
client (server and driver, no HTTP) and prints p50 and p95 against the dashboard's 200 ms bar.
RIPPLE_BENCH_SEARCH_KEEP=name seeds a database of that name once and reuses it afterwards.

    python -m bench --only search
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg

from bench.common import PG_URL, REDIS_URL, bench_database, pct, report, with_database
from ripple.platform.client import Client
from ripple.platform.core.config import Settings, load_settings

RUNS = int(os.environ.get("RIPPLE_BENCH_SEARCH_RUNS", "1000000"))
EVENTS = int(os.environ.get("RIPPLE_BENCH_SEARCH_EVENTS", "10000000"))
REQUESTS = 30
BAR_MS = 200.0

# $1 run count: time-ordered ids, five workflows, one run per 10 ms back from now.
SEED_RUNS = """
INSERT INTO ripple_runs (run_id, workflow, status, attempt, created_at, completed_at)
SELECT lpad(to_hex((extract(epoch FROM now()) * 1000)::bigint - ($1 - i) * 10), 12, '0')
       || '-' || lpad(to_hex(i), 12, '0'),
       'wf' || (i % 5), (ARRAY['completed', 'failed', 'waiting'])[1 + i % 3], 1,
       now() - ($1 - i) * interval '10 ms', now()
FROM generate_series(1, $1) AS i
"""
SEED_ATTRIBUTES = """
INSERT INTO ripple_run_attributes (run_id, name, type, value_text, value_num)
SELECT run_id, 'customer', 'str', 'c' || (abs(hashtext(run_id)) % 1000), NULL FROM ripple_runs
UNION ALL
SELECT run_id, 'amount', 'float', NULL, abs(hashtext(run_id || 'a')) % 100000 FROM ripple_runs
"""
# $1 event count, spread over the last seven days; 20 topics.
SEED_EVENTS = """
INSERT INTO ripple_events (id, topic, payload, created_at)
SELECT ripple_uuid7(now() - (i::float8 / $1) * interval '7 days'), 'shop.t' || (i % 20),
       jsonb_build_object('customerId', i % 100000, 'total', i % 977, 'tags',
                          jsonb_build_array('t' || (i % 7))),
       now() - (i::float8 / $1) * interval '7 days'
FROM generate_series(1, $1) AS i
"""


async def _time(name: str, call: Callable[[], Awaitable[Any]], count: Callable[[Any], int]) -> None:
    walls: list[float] = []
    found = 0
    for _ in range(REQUESTS):
        started = time.perf_counter()
        result = await call()
        walls.append((time.perf_counter() - started) * 1000)
        found = count(result)
    p95 = pct(walls, 95)
    verdict = "within" if p95 <= BAR_MS else "OVER"
    report(
        f"  {name}",
        f"p50 {pct(walls, 50):.1f} ms, p95 {p95:.1f} ms ({verdict} the {BAR_MS:.0f} ms bar; "
        f"{found} found)",
    )


async def _seed(url: str) -> None:
    conn = await asyncpg.connect(url)  # no statement timeout for the seed
    try:
        await conn.execute(SEED_RUNS, RUNS)
        await conn.execute(SEED_ATTRIBUTES)
        await conn.execute(SEED_EVENTS, EVENTS)
        for table in ("ripple_runs", "ripple_run_attributes", "ripple_events"):
            await conn.execute(f"VACUUM ANALYZE {table}")
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def search_database() -> AsyncIterator[tuple[Settings, str, bool]]:
    """Settings for the database searched and whether it needs seeding: a fresh one (dropped
    afterwards), or the one RIPPLE_BENCH_SEARCH_KEEP names, seeded on first use and kept."""
    keep = os.environ.get("RIPPLE_BENCH_SEARCH_KEEP")
    if not keep:
        async with bench_database() as db:
            yield db.settings, db.url, True
        return
    admin = await asyncpg.connect(PG_URL)
    try:
        fresh = not await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", keep)
        if fresh:
            await admin.execute(f'CREATE DATABASE "{keep}"')
    finally:
        await admin.close()
    url = with_database(PG_URL, keep)
    settings = load_settings(database_url=url, redis_url=REDIS_URL, redis_prefix=f"{keep}:")
    yield settings, url, fresh


async def run() -> None:
    # Connecting applies pending migrations, to a kept database's data too.
    async with search_database() as (settings, url, fresh), Client(settings=settings) as client:
        started = time.perf_counter()
        if fresh:
            await _seed(url)
        conn = await asyncpg.connect(url)  # counting takes longer than the pool's timeout
        try:
            row = await conn.fetchrow(
                "SELECT (SELECT count(*) FROM ripple_runs), (SELECT count(*) FROM ripple_events),"
                " (SELECT max(created_at) FROM ripple_events)"
            )
        finally:
            await conn.close()
        assert row is not None
        runs_n, events_n, newest = row
        report(
            f"search over {runs_n:,} runs / {events_n:,} events",
            f"seeded in {time.perf_counter() - started:.0f} s" if fresh else "kept database",
        )
        runs = [
            ('customer = "c7"', None),
            ("amount > 99990", None),
            ('customer = "c7" and amount > 50000', None),
            ('customer in ["c1", "c2", "c3"]', "wf1"),
            ('status = "failed" and amount < 10', None),
            ('customer = "nobody"', None),
        ]
        for where, workflow in runs:
            label = where + (f" (workflow {workflow})" if workflow else "")

            async def list_runs(where: str = where, workflow: str | None = workflow) -> Any:
                return await client.list_runs(workflow, where=where, limit=50)

            await _time(f"runs where {label}", list_runs, lambda page: len(page.items))
        # The windows end at the newest event: a kept database's events age.
        now = newest + timedelta(seconds=1)
        events: list[tuple[str, dict[str, Any]]] = [
            ("last hour (default), customerId 42", {"where": {"customerId": 42}}),
            ("last day, no filter", {"since": now - timedelta(days=1)}),
            (
                "last day, customerId 42",
                {"where": {"customerId": 42}, "since": now - timedelta(days=1)},
            ),
            (
                "last day, topic + customerId 42",
                {"topic": "shop.t2", "where": {"customerId": 42}, "since": now - timedelta(days=1)},
            ),
            (
                "last hour, tags [t3]",
                {"where": {"tags": ["t3"]}, "since": now - timedelta(hours=1)},
            ),
            ("last day, no match", {"where": {"customerId": -1}, "since": now - timedelta(days=1)}),
            # One event in 977: uncommon, not rare (a thousand in the day, about 60 in the hour).
            ("last day, total 5", {"where": {"total": 5}, "since": now - timedelta(days=1)}),
            ("last hour, total 5", {"where": {"total": 5}, "since": now - timedelta(hours=1)}),
        ]
        for label, kw in events:

            async def list_events(kw: dict[str, Any] = kw) -> Any:
                return await client.list_events(limit=50, until=now, **kw)

            await _time(f"events {label}", list_events, lambda page: len(page.items))
