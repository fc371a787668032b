"""Dashboard render times: p95 per page over a large seeded database.

Seeds RIPPLE_BENCH_UI_RUNS runs (default 1,000,000) with 5 journal rows each and a queue
backlog of half as many messages by SQL, plus a few real events fanned out to a queue, a webhook
and a workflow, and two schedules, then renders every page REQUESTS times in process (ASGI, no
network) and prints the server-side p50 and p95, after a baseline request through the same app
that reads no database (a static file).

    make bench BENCH_ARGS="--only ui"

The seed takes a minute or more. With RIPPLE_BENCH_UI_DB=NAME the seeded database is kept under that
name and reused by the next run (seeded only when it does not exist yet); drop it by hand
(`dropdb NAME`) when done.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator

import asyncpg
import httpx

from bench.common import PG_URL, REDIS_URL, BenchDb, bench_database, pct, report, with_database
from ripple.platform.api.app import create_app
from ripple.platform.client import Client
from ripple.platform.core.config import load_settings
from ripple.subscribers import QueueTarget, WebhookTarget, WorkflowTarget

RUNS = int(os.environ.get("RIPPLE_BENCH_UI_RUNS", "1000000"))
STEPS_PER_RUN = 5
BACKLOG = RUNS // 2
REQUESTS = 40
#: The floor: a request through the same app and middleware that reads no database.
BASELINE = "/ui/static/style.css"
#: Keep (and reuse) the seeded database under this name.
KEEP_DB = os.environ.get("RIPPLE_BENCH_UI_DB", "")

# $1 run count. Time-ordered run ids (like uuid7 text), one run per 10 ms back from now.
SEED_RUNS = """
INSERT INTO ripple_runs (run_id, workflow, status, input, output, attempt, created_at,
                         started_at, completed_at)
SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-7000-8000-' || lpad(to_hex(i), 12, '0'),
       'wf' || (i % 5),
       (ARRAY['completed', 'completed', 'completed', 'failed', 'canceled', 'waiting',
              'sleeping'])[1 + i % 7],
       jsonb_build_object('i', i), jsonb_build_object('ok', true), 1, t, t, t + interval '1 s'
FROM generate_series(1, $1) AS i
CROSS JOIN LATERAL (SELECT now() - ($1 - i) * interval '10 ms' AS t) AS tt
CROSS JOIN LATERAL (
    SELECT lpad(to_hex((extract(epoch FROM t) * 1000)::bigint), 12, '0') AS h
) AS hh
"""
SEED_STEPS = """
INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, started_at, completed_at)
SELECT r.run_id, 'step-' || k, k, 'step', 'completed', 1,
       r.created_at + k * interval '100 ms', r.created_at + k * interval '150 ms'
FROM ripple_runs r CROSS JOIN generate_series(1, $1) AS k
"""


@contextlib.asynccontextmanager
async def _kept_database(name: str, **overrides: object) -> AsyncIterator[tuple[BenchDb, bool]]:
    """The database `name`, created when missing (then True: it needs the seed); never dropped."""
    admin = await asyncpg.connect(PG_URL)
    try:
        exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    url = with_database(PG_URL, name)
    settings = load_settings(
        database_url=url, redis_url=REDIS_URL, redis_prefix=f"benchui{name}:", **overrides
    )
    yield BenchDb(url, name, settings), not exists


@contextlib.asynccontextmanager
async def _database(**overrides: object) -> AsyncIterator[tuple[BenchDb, bool]]:
    if KEEP_DB:
        async with _kept_database(KEEP_DB, **overrides) as kept:
            yield kept
    else:
        async with bench_database(**overrides) as db:
            yield db, True


async def _targets(client: Client) -> tuple[str, str]:
    """The run and event whose pages are timed (the newest of the seed)."""
    run_id = str(
        await client.pool.fetchval("SELECT max(run_id) FROM ripple_runs WHERE workflow = 'wf1'")
    )
    event_id = str(
        await client.pool.fetchval(
            "SELECT id::text FROM ripple_events WHERE topic = 'order.created' "
            "ORDER BY created_at DESC LIMIT 1"
        )
    )
    return run_id, event_id


# $1 count: a backlog of visible messages in one queue (the queue pages count it bounded).
SEED_BACKLOG = """
INSERT INTO ripple_queue_messages (queue, body, created_at, visible_at)
SELECT 'backlog', jsonb_build_object('i', i), now() - i * interval '1 ms',
       now() - i * interval '1 ms'
FROM generate_series(1, $1) AS i
"""


async def _seed(client: Client) -> None:
    started = time.perf_counter()
    async with client.pool.acquire() as conn:
        await conn.execute(SEED_RUNS, RUNS)
        await conn.execute(SEED_STEPS, STEPS_PER_RUN)
        await conn.execute(SEED_BACKLOG, BACKLOG)
        await conn.execute("ANALYZE ripple_runs")
        await conn.execute("ANALYZE ripple_steps")
        await conn.execute("ANALYZE ripple_queue_messages")
    await client.subscribe("order.#", QueueTarget("orders"))
    await client.subscribe("order.*", WorkflowTarget("fulfil"))
    await client.subscribe("order.created", WebhookTarget("http://127.0.0.1:9/hook"))
    for i in range(20):
        await client.publish("order.created", {"id": i})
    print(
        f"  seeded {RUNS:,} runs, {RUNS * STEPS_PER_RUN:,} journal rows and {BACKLOG:,} queue "
        "messages "
        f"in {time.perf_counter() - started:.0f} s",
        flush=True,
    )


async def run() -> None:
    # the seed statements run for minutes; RIPPLE_DB_TIMEOUT (5 s) would cancel them
    overrides = {"webhook_allowed_networks": ["127.0.0.0/8"], "db_timeout": 3600.0}
    async with _database(**overrides) as (db, fresh), Client(settings=db.settings) as client:
        if fresh:
            await _seed(client)
        else:
            print(f"  reusing the seeded database {db.name}", flush=True)
        run_id, event_id = await _targets(client)
        for name, cron in (("nightly", "0 3 * * *"), ("hourly", "0 * * * *")):
            await client.schedules.create(name, workflow="wf1", cron=cron)
        await client.schedules.trigger("hourly")
        pages = [
            BASELINE,
            "/ui/",
            "/ui/runs",
            "/ui/runs?status=failed&range=24h",
            "/ui/runs?workflow=wf3",
            f"/ui/runs/{run_id}",
            f"/ui/events/{event_id}",
            "/ui/topics",
            "/ui/queues",
            "/ui/queues?peek=orders",
            "/ui/queues?peek=backlog",
            "/ui/deliveries?status=pending",
            "/ui/schedules",
        ]
        transport = httpx.ASGITransport(app=create_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            for page in pages:
                assert (await http.get(page)).status_code == 200, page  # warm, and a check
                samples = []
                for _ in range(REQUESTS):
                    t0 = time.perf_counter()
                    response = await http.get(page)
                    samples.append(time.perf_counter() - t0)
                    assert response.status_code == 200, page
                name = page.replace(run_id, "{run}").replace(event_id, "{event}")
                report(
                    f"baseline {name} (no database)" if page == BASELINE else f"render {name}",
                    f"p50 {pct(samples, 50) * 1000:.1f} ms, p95 {pct(samples, 95) * 1000:.1f} ms "
                    f"(n={len(samples)})",
                )
