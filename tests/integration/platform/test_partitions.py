"""Time partitions of events, webhook deliveries and attempts against real Postgres: creation
ahead, retention by dropping whole partitions (and keeping held ones), deduplication across
partitions, the online migration of an existing database, and pruning."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import pytest

from ripple.platform.client import Client
from ripple.platform.core import ids
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool
from ripple.platform.core.migrate import apply_migrations, load_migrations
from ripple.platform.events import event_store
from ripple.platform.ops.partitions import Partitions
from ripple.platform.ops.sweeper import Sweeper
from ripple.subscribers.webhooks import delivery_store
from tests.helpers import PARTITIONED as TABLES
from tests.helpers import partitioned_since, throwaway_database

DAY = 86_400.0


def id_at(when: datetime, *salt: str) -> str:
    """A UUIDv7 made at `when` (deterministic per salt)."""
    floor = ids.id_time_floor(int(when.timestamp() * 1000))
    return ids.derived_id(floor, *salt)


async def partitions_of(pool: Pool, parent: str) -> list[str]:
    rows = await pool.fetch(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = $1::regclass ORDER BY c.relname",
        parent,
    )
    return [r["relname"] for r in rows]


async def partition_holding(pool: Pool, table: str, key: str, value: str) -> str:
    found: str = await pool.fetchval(
        f"SELECT tableoid::regclass::text FROM {table} WHERE {key} = $1", value
    )
    return found


async def insert_event(
    pool: Pool, event_id: str, key: str | None = None, *, claim_key: bool = True
) -> None:
    """An event as publish writes it (its key claimed too, unless `claim_key` is False: as
    before migration 0026)."""
    await pool.execute(
        "INSERT INTO ripple_events (id, topic, payload, idempotency_key) "
        "VALUES ($1, 'user.signup', '{}', $2)",
        event_id,
        key,
    )
    if key is not None and claim_key:
        await pool.execute(
            "INSERT INTO ripple_event_keys (idempotency_key, event_id) VALUES ($1, $2)",
            key,
            event_id,
        )


async def insert_delivery(pool: Pool, delivery_id: str, *, status: str, attempts: int) -> None:
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(
            """
            INSERT INTO ripple_webhook_deliveries (id, subscription_id, event_id, topic,
                                                   event_time, status, next_attempt_at)
            VALUES ($1, gen_random_uuid(), $1, 't', now(), $2,
                    CASE WHEN $2 = 'pending' THEN now() END)
            """,
            delivery_id,
            status,
        )
        for attempt in range(1, attempts + 1):
            await conn.execute(
                "INSERT INTO ripple_webhook_attempts (delivery_id, attempt, started_at, "
                "latency_ms, outcome) VALUES ($1, $2, now(), 1, 'retry')",
                delivery_id,
                attempt,
            )


def frozen_clock(monkeypatch: pytest.MonkeyPatch, when: datetime) -> None:
    """New ids are made at `when` (the clock of ripple.platform.core.ids only)."""

    class Clock:
        @staticmethod
        def time_ns() -> int:
            return int(when.timestamp() * 1e9)

    monkeypatch.setattr(ids, "time", Clock)
    monkeypatch.setattr(ids, "_last", (0, 0))  # ids stay increasing per process: start over


async def test_partitions__created_ahead_contiguous_and_idempotent(
    pool: Pool, settings: Settings
) -> None:
    partitions = Partitions(pool, settings.model_copy(update={"partitions_ahead": 10}))

    created = await partitions.ensure()

    assert created > 0
    assert await partitions.ensure() == 0
    for parent in TABLES:
        rows = await pool.fetch(
            "SELECT name, lower, upper FROM ripple_partitions WHERE parent = $1 ORDER BY upper",
            parent,
        )
        assert rows[-1]["upper"] >= datetime.now(UTC) + timedelta(days=10)
        assert all(a["upper"] == b["lower"] for a, b in itertools.pairwise(rows))
        assert sorted(r["name"] for r in rows) == await partitions_of(pool, parent)


async def test_partitions__a_publish_past_every_partition_creates_its_own(
    client: Client, pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    later = datetime.now(UTC) + timedelta(days=40)
    frozen_clock(monkeypatch, later)

    event = await client.publish("user.signup", {"n": 1})

    assert ids.id_time(event.event_id).date() == later.date()
    holder = await partition_holding(pool, "ripple_events", "id", event.event_id)
    assert holder == f"ripple_events_p{later:%Y%m%d}t000000"


async def test_partitions__idempotent_publish_deduplicates_across_partitions(
    client: Client, pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = datetime.now(UTC)
    frozen_clock(monkeypatch, now + timedelta(days=3))
    first = await client.publish("user.signup", {"n": 1}, idempotency_key="once")
    frozen_clock(monkeypatch, now + timedelta(days=5))

    again = await client.publish("user.signup", {"n": 2}, idempotency_key="once")
    other = await client.publish("user.signup", {"n": 3}, idempotency_key="twice")

    assert again.event_id == first.event_id
    assert other.event_id != first.event_id
    count = "SELECT count(*) FROM ripple_events WHERE idempotency_key = 'once'"
    assert await pool.fetchval(count) == 1
    assert await partition_holding(
        pool, "ripple_events", "id", first.event_id
    ) != await partition_holding(pool, "ripple_events", "id", other.event_id)


async def test_partitions__retention_drops_old_partitions_whole_and_keeps_held_ones(
    pool: Pool, settings: Settings
) -> None:
    now = datetime.now(UTC)
    async with pool.acquire() as conn:
        await partitioned_since(conn, now - timedelta(days=12))
    old = [id_at(now - timedelta(days=10), "old", str(i)) for i in range(3)]
    for i, event_id in enumerate(old):
        await insert_event(pool, event_id, key=f"old-{i}")
    recent = id_at(now - timedelta(days=1), "recent")
    await insert_event(pool, recent, key="recent")
    delivered = id_at(now - timedelta(days=10), "delivered")
    await insert_delivery(pool, delivered, status="delivered", attempts=2)
    pending = id_at(now - timedelta(days=9), "pending")  # held: still being retried
    await insert_delivery(pool, pending, status="pending", attempts=3)
    held_partition = await partition_holding(pool, "ripple_webhook_deliveries", "id", pending)
    dropped = await partition_holding(pool, "ripple_events", "id", old[0])

    result = await Sweeper(pool, settings).sweep_once()

    assert result["events"] == 3
    assert result["webhook_deliveries"] == 1
    assert result["webhook_attempts"] == 2
    assert dropped not in await partitions_of(pool, "ripple_events")
    assert await pool.fetchval("SELECT to_regclass($1)", dropped) is None
    remaining = await pool.fetch("SELECT id::text FROM ripple_events")
    assert [r["id"] for r in remaining] == [recent]
    assert held_partition in await partitions_of(pool, "ripple_webhook_deliveries")
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM ripple_webhook_attempts WHERE delivery_id = $1", pending
        )
        == 3
    )
    # the keys of the dropped events are reusable, the others are not
    async with pool.acquire() as conn:
        assert await event_store.find_events_by_keys(conn, ["old-0", "recent"]) == {
            "recent": recent
        }
    # once the delivery is finished, its partition and its attempts go
    await pool.execute(
        "UPDATE ripple_webhook_deliveries SET status = 'delivered', next_attempt_at = NULL "
        "WHERE id = $1",
        pending,
    )
    again = await Sweeper(pool, settings).sweep_once()
    assert (again["webhook_deliveries"], again["webhook_attempts"]) == (1, 3)
    assert held_partition not in await partitions_of(pool, "ripple_webhook_deliveries")


async def test_partitions__lookups_by_id_prune_to_one_partition(pool: Pool) -> None:
    now = datetime.now(UTC)
    event_id = id_at(now, "plan")
    await insert_event(pool, event_id)
    await insert_delivery(pool, event_id, status="pending", attempts=1)

    async def scanned(sql: str, *args: Any) -> set[str]:
        async with pool.acquire() as conn:
            # A prepared statement's generic plan prunes at executor start, not at planning.
            await conn.execute("SET plan_cache_mode = force_generic_plan")
            plan = await conn.fetchval(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", *args)
            await conn.execute("RESET plan_cache_mode")
        found: set[str] = set()

        def walk(node: dict[str, Any]) -> None:
            if "Relation Name" in node:
                found.add(node["Relation Name"])
            for child in node.get("Plans", []):
                walk(child)

        walk((plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"])
        return found

    holder = await partition_holding(pool, "ripple_events", "id", event_id)
    assert await scanned(event_store.SELECT_EVENT, event_id) == {holder}
    delivery_holder = await partition_holding(pool, "ripple_webhook_deliveries", "id", event_id)
    assert await scanned(delivery_store.GET_DELIVERY, event_id) == {delivery_holder}
    attempts = await scanned(delivery_store.LIST_ATTEMPTS, event_id)
    assert attempts == {delivery_holder.replace("deliveries", "attempts")}


async def primary_keys(pool: Pool, parent: str) -> dict[str, str]:
    """The primary key of `parent` and of each of its partitions, by table."""
    rows = await pool.fetch(
        "SELECT c.conrelid::regclass::text AS t, pg_get_constraintdef(c.oid) AS key "
        "FROM pg_constraint c WHERE c.contype = 'p' AND (c.conrelid = $1::regclass "
        "OR c.conrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = $1::regclass))",
        parent,
    )
    return {r["t"]: r["key"] for r in rows}


async def test_partitions__webhook_attempts_have_a_primary_key_in_every_partition(
    pool: Pool, settings: Settings
) -> None:
    await Partitions(pool, settings.model_copy(update={"partitions_ahead": 20})).ensure()

    keys = await primary_keys(pool, "ripple_webhook_attempts")

    tables = {"ripple_webhook_attempts", *await partitions_of(pool, "ripple_webhook_attempts")}
    assert keys == dict.fromkeys(tables, "PRIMARY KEY (delivery_id, id)")
    delivery = id_at(datetime.now(UTC), "keyed")
    await insert_delivery(pool, delivery, status="delivered", attempts=1)
    with pytest.raises(asyncpg.UniqueViolationError):
        await pool.execute(
            "INSERT INTO ripple_webhook_attempts (id, delivery_id, attempt, started_at, "
            "latency_ms, outcome) SELECT id, delivery_id, 2, now(), 1, 'retry' "
            "FROM ripple_webhook_attempts WHERE delivery_id = $1",
            delivery,
        )


async def test_partitions__online_migration_of_a_seeded_database(
    pg_admin_url: str, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with throwaway_database(pg_admin_url, "ripple_partition_migration") as url:
        pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
        assert pool is not None
        try:
            before = [m for m in load_migrations() if m.version < 26]
            await apply_migrations(pool, before)
            seeded = [ids.new_id() for _ in range(50)]
            for i, event_id in enumerate(seeded):
                await insert_event(pool, event_id, key=f"seed-{i}", claim_key=False)
            await insert_delivery(pool, seeded[0], status="delivered", attempts=2)

            assert await apply_migrations(pool) == len(load_migrations()) - len(before)

            assert await partitions_of(pool, "ripple_events") != []
            assert (
                await partition_holding(pool, "ripple_events", "id", seeded[0])
                == "ripple_events_legacy"
            )
            assert (
                await pool.fetchval(
                    "SELECT count(*) FROM ripple_webhook_attempts WHERE delivery_id = $1", seeded[0]
                )
                == 2
            )
            assert (await primary_keys(pool, "ripple_webhook_attempts"))[
                "ripple_webhook_attempts_legacy"
            ] == "PRIMARY KEY (delivery_id, id)"
        finally:
            await pool.close()
        migrated = settings.model_copy(update={"database_url": url})
        async with Client(settings=migrated) as client:
            assert (await client.publish("x.y", {}, idempotency_key="seed-7")).event_id == seeded[7]
            later = datetime.now(UTC) + timedelta(days=3)
            frozen_clock(monkeypatch, later)
            new = await client.publish("x.y", {}, idempotency_key="fresh")
            assert (await client.publish("x.y", {}, idempotency_key="seed-8")).duplicate
            async with client.pool.acquire() as conn:
                assert (await event_store.get_event(conn, seeded[3])) is not None
                holder = await conn.fetchval(
                    "SELECT tableoid::regclass::text FROM ripple_events WHERE id = $1",
                    new.event_id,
                )
            assert holder == f"ripple_events_p{later:%Y%m%d}t000000"
