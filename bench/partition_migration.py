"""`python -m bench --only partition_migration`: the online migration to time partitions on a
seeded database, and how long it blocks readers.

Applies the migrations before 0026 to a fresh database, seeds RIPPLE_MIGRATION_EVENTS events
(default 1M; one in ten with an idempotency key) spread over the last 7 days, one webhook
delivery per ten events and two attempts per delivery (generate_series SQL), then applies
0026, 0027 and 0028 one by one: each one's time. Meanwhile a reader looks events up by id in a
loop; its slowest lookup during each migration is how long that migration blocked it (the
exclusive locks are the only thing a lookup by id waits for).
"""

from __future__ import annotations

import asyncio
import os
import time

import asyncpg

from bench.common import bench_database, report
from ripple.platform.core.migrate import apply_migrations, load_migrations

EVENTS = int(os.environ.get("RIPPLE_MIGRATION_EVENTS", "1000000"))

# $1 count; ids time-ordered like uuid7 (48-bit millisecond prefix), as Ripple makes them.
_UUID = (
    "(lpad(to_hex((extract(epoch FROM {ts}) * 1000)::bigint), 12, '0') || '7' "
    "|| substr(md5({g}::text), 1, 19))::uuid"
)
SEED = f"""
INSERT INTO ripple_events (id, topic, payload, idempotency_key, created_at)
SELECT {_UUID.format(ts="t", g="g")}, 'seed.t' || (g % 20), jsonb_build_object('n', g),
       CASE WHEN g % 10 = 0 THEN 'key-' || g END, t
FROM generate_series(1, $1::bigint) AS g,
     LATERAL (SELECT now() - interval '7 days' + (g::float8 / $1) * interval '7 days') AS x(t);
"""
SEED_DELIVERIES = """
INSERT INTO ripple_webhook_deliveries (id, subscription_id, event_id, topic, event_time,
                                       status, next_attempt_at)
SELECT id, '00000000-0000-0000-0000-000000000001', id, topic, created_at, 'delivered', NULL
FROM ripple_events WHERE idempotency_key IS NOT NULL
"""
SEED_ATTEMPTS = """
INSERT INTO ripple_webhook_attempts (delivery_id, attempt, started_at, latency_ms, outcome)
SELECT id, k, now(), 1, 'delivered' FROM ripple_webhook_deliveries, generate_series(1, 2) AS k
"""


async def run() -> None:
    async with bench_database() as db:
        pool = await asyncpg.create_pool(db.url, min_size=1, max_size=2)
        assert pool is not None
        migrations = load_migrations()
        await apply_migrations(pool, [m for m in migrations if m.version < 26])
        t0 = time.perf_counter()
        async with pool.acquire() as conn:
            await conn.execute(SEED, EVENTS, timeout=None)
            await conn.execute(SEED_DELIVERIES, timeout=None)
            await conn.execute(SEED_ATTEMPTS, timeout=None)
            await conn.execute("VACUUM ANALYZE", timeout=None)
            ids = [r[0] for r in await conn.fetch("SELECT id FROM ripple_events LIMIT 1000")]
            size = await conn.fetchval(
                "SELECT pg_size_pretty(pg_database_size(current_database()))"
            )
        report(
            "partition migration: seeded",
            f"{EVENTS:,} events, {EVENTS // 10:,} deliveries, {EVENTS // 5:,} attempts "
            f"({size}) in {time.perf_counter() - t0:,.0f} s",
        )
        reader = await asyncpg.connect(db.url)
        try:
            for migration in [m for m in migrations if m.version >= 26]:
                slowest = 0.0
                done = asyncio.Event()

                async def read(slowest_box: list[float], finished: asyncio.Event) -> None:
                    n = 0
                    while not finished.is_set():
                        t = time.perf_counter()
                        await reader.fetchval(
                            "SELECT topic FROM ripple_events WHERE id = $1", ids[n % len(ids)]
                        )
                        slowest_box[0] = max(slowest_box[0], time.perf_counter() - t)
                        n += 1
                        await asyncio.sleep(0.005)

                box = [0.0]
                task = asyncio.create_task(read(box, done))
                await asyncio.sleep(0.2)
                t0 = time.perf_counter()
                await apply_migrations(
                    pool, [m for m in migrations if m.version <= migration.version]
                )
                took = time.perf_counter() - t0
                done.set()
                await task
                slowest = box[0]
                report(
                    f"partition migration: {migration.version:04d}_{migration.name}",
                    f"{took:,.2f} s; slowest lookup by id meanwhile {slowest * 1000:,.0f} ms",
                )
        finally:
            await reader.close()
            await pool.close()


if __name__ == "__main__":
    asyncio.run(run())
