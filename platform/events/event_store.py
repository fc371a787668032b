"""SQL for published events; row mapping only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import asyncpg

from ripple.platform.core.db import Connection, Pool, transaction
from ripple.platform.ops import partition_store

__all__ = [
    "EventRecord",
    "find_events_by_keys",
    "get_event",
    "insert_events",
    "paths_carried",
    "recent_events",
    "search_events",
    "search_statement",
    "topic_activity",
    "topic_events_since",
]

# $1 the events, a JSON array of {id, topic, payload (JSON text, encoded once by publish), key
# (idempotency key or null), trace, version (the subscription set each event was matched
# against), schema (the topic schema version it was validated against, or null), ce
# (CloudEvents attributes or null)}. Events whose key exists already (or repeats earlier in the
# batch) are skipped and not returned: the key is claimed in ripple_event_keys first (the
# partitioned event table cannot hold a unique index on it), and an event is written only with
# no key or with the key it claimed. `waited`: whether some workflow wait listens to the
# event's topic (a probe that spares the wait resolver's statements for topics nobody waits on,
# in the same round trip).
INSERT_EVENTS: Final = """
WITH e AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb)
        AS e(id uuid, topic text, payload text, key text, trace jsonb, version bigint,
             schema integer, ce jsonb)
), claimed AS (
    INSERT INTO ripple_event_keys (idempotency_key, event_id)
    SELECT e.key, e.id FROM e WHERE e.key IS NOT NULL
    ON CONFLICT (idempotency_key) DO NOTHING
    RETURNING event_id
), inserted AS (
    INSERT INTO ripple_events
        (id, topic, payload, idempotency_key, trace, subscriptions_version, schema_version,
         cloudevent)
    SELECT e.id, e.topic, e.payload::jsonb, e.key, e.trace, e.version, e.schema, e.ce
    FROM e
    WHERE e.key IS NULL OR e.id IN (SELECT event_id FROM claimed)
    RETURNING id, topic, created_at
)
SELECT id, created_at, EXISTS (SELECT 1 FROM ripple_waits w WHERE w.event = inserted.topic)
    AS waited
FROM inserted
"""
# $1 idempotency keys text[]
SELECT_EVENTS_BY_KEYS: Final = """
SELECT event_id AS id, idempotency_key FROM ripple_event_keys
WHERE idempotency_key = ANY($1::text[])
"""
# $1 id
SELECT_EVENT: Final = """
SELECT id, topic, payload, idempotency_key, trace, created_at, schema_version, cloudevent
FROM ripple_events WHERE id = $1
"""
# $1 topic, $2 a path of keys (text[]): whether a stored event of the topic has a value there
# (a schema registration asks before declaring a property an open model never declared).
SELECT_PATH_CARRIED: Final = """
SELECT EXISTS (SELECT 1 FROM ripple_events WHERE topic = $1 AND payload #> $2::text[] IS NOT NULL)
"""

# $1 since (timestamptz), $2 most topics. Per topic: events since then and the newest one's time
# (the created_at index bounds the scan to the window).
SELECT_TOPIC_ACTIVITY: Final = """
SELECT topic, count(*) AS events, max(created_at) AS last_at
FROM ripple_events WHERE created_at >= $1
GROUP BY topic ORDER BY topic LIMIT $2
"""
# $1 topic, $2 since (timestamptz): how many events of the topic since then (the (topic,
# created_at) index).
SELECT_TOPIC_EVENTS_SINCE: Final = """
SELECT count(*) FROM ripple_events WHERE topic = $1 AND created_at >= $2
"""
# $1 topic, $2 limit: its newest events (the (topic, created_at) index).
SELECT_RECENT_EVENTS: Final = """
SELECT id, topic, payload, idempotency_key, trace, created_at, schema_version, cloudevent
FROM ripple_events WHERE topic = $1 ORDER BY created_at DESC LIMIT $2
"""

# Event search, newest first, in a bounded time window. The planner picks per search: the
# (created_at) or (topic, created_at) index walked backwards from `until` with the payload
# tested on those rows (no `where`, or a common one: the limit is reached soon), or the payload
# GIN index for a rare `where` (the few rows it lists, sorted).
# $1 since, $2 until, $3 payload containment (NULL: any), $4 cursor (created_at, id) or NULLs,
# $5 cursor id, $6 limit, $7 and $8 the ids bounding the partitions of the window (NULL: no
# bound; see `search_statement`); the topic form adds $9 topic. ripple_events is partitioned by
# id, not created_at: the id bounds prune the partitions outside the window. They are
# partition bounds, not the window's own: inside a partition kept they exclude nothing, so the
# planner's estimate of the created_at range stands (a bound repeating that range would be
# taken as independent of it, and the underestimate made it trade the index walk for bitmaps
# and a sort).
_SEARCH_HEAD: Final = """
SELECT id, topic, payload, idempotency_key, trace, created_at, schema_version, cloudevent
FROM ripple_events
WHERE created_at >= $1 AND created_at < $2
  AND ($3::jsonb IS NULL OR payload @> $3)
  AND ($4::timestamptz IS NULL OR (created_at, id) < ($4, $5::uuid))
  AND ($7::uuid IS NULL OR id >= $7::uuid) AND ($8::uuid IS NULL OR id < $8::uuid)
"""
_SEARCH_TAIL: Final = "ORDER BY created_at DESC, id DESC LIMIT $6"
SEARCH_EVENTS: Final = _SEARCH_HEAD + _SEARCH_TAIL
SEARCH_TOPIC_EVENTS: Final = _SEARCH_HEAD + "  AND topic = $9\n" + _SEARCH_TAIL
#: How far an event's `created_at` may be from the time in its id: the id is made by the
#: publisher's clock before its transaction, `created_at` is the database's `now()` of that
#: transaction (the wait for it, and the clocks' skew).
ID_TIME_MARGIN: Final = timedelta(hours=1)
# Plan the search for its own values every time (for the rest of the transaction): the plan
# cache would settle on a generic plan after five, one that cannot use the payload index.
PLAN_EACH_SEARCH: Final = "SELECT set_config('plan_cache_mode', 'force_custom_plan', true)"


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One stored event."""

    id: str
    topic: str
    payload: Any
    idempotency_key: str | None
    trace: dict[str, str] | None
    created_at: datetime
    #: The topic schema version the payload was validated against (None: no schema).
    schema_version: int | None = None
    #: The CloudEvents context attributes it was ingested with (None if not a CloudEvent).
    cloudevent: dict[str, Any] | None = None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> EventRecord:
        return cls(
            id=str(row["id"]),
            topic=row["topic"],
            payload=row["payload"],
            idempotency_key=row["idempotency_key"],
            trace=row["trace"],
            created_at=row["created_at"],
            schema_version=row["schema_version"],
            cloudevent=row["cloudevent"],
        )


async def get_event(conn: Connection, event_id: str) -> EventRecord | None:
    row = await conn.fetchrow(SELECT_EVENT, event_id)
    return None if row is None else EventRecord.from_row(row)


async def insert_events(
    conn: Connection,
    ids: list[str],
    topics: list[str],
    payloads: list[str],
    keys: list[str | None],
    traces: list[dict[str, str] | None],
    versions: list[int | None],
    schema_versions: list[int | None],
    cloudevents: list[dict[str, Any] | None],
) -> dict[str, tuple[datetime, bool]]:
    """Insert events (`payloads` as JSON text, `cloudevents` their CloudEvents attributes); for
    those inserted (repeated keys are left out), by id: the creation time and whether a
    workflow wait listens to the topic."""
    # One JSON document, not eight parallel arrays: asyncpg checks each array element's type
    # in Python (two to three isinstance checks of abstract classes apiece).
    doc = [
        {
            "id": i,
            "topic": t,
            "payload": p,
            "key": k,
            "trace": c,
            "version": v,
            "schema": s,
            "ce": e,
        }
        for i, t, p, k, c, v, s, e in zip(
            ids, topics, payloads, keys, traces, versions, schema_versions, cloudevents, strict=True
        )
    ]
    rows = await conn.fetch(INSERT_EVENTS, doc)
    return {str(row[0]): (row[1], row[2]) for row in rows}


async def find_events_by_keys(conn: Connection, keys: list[str]) -> dict[str, str]:
    """Event id by idempotency key, for the keys that exist."""
    rows = await conn.fetch(SELECT_EVENTS_BY_KEYS, keys)
    return {row["idempotency_key"]: str(row["id"]) for row in rows}


async def paths_carried(
    conn: Connection, topic: str, paths: list[tuple[str, ...]]
) -> list[tuple[str, ...]]:
    """The key paths some stored event of `topic` has a value at."""
    return [path for path in paths if await conn.fetchval(SELECT_PATH_CARRIED, topic, list(path))]


async def topic_activity(
    conn: Connection, since: datetime, limit: int
) -> dict[str, tuple[int, datetime]]:
    """Per topic with events since `since` (at most `limit` topics): how many, and the last's
    time."""
    rows = await conn.fetch(SELECT_TOPIC_ACTIVITY, since, limit)
    return {row["topic"]: (row["events"], row["last_at"]) for row in rows}


async def topic_events_since(conn: Connection, topic: str, since: datetime) -> int:
    """How many events of `topic` were published since `since`."""
    return int(await conn.fetchval(SELECT_TOPIC_EVENTS_SINCE, topic, since))


async def recent_events(conn: Connection, topic: str, limit: int) -> list[EventRecord]:
    """The newest `limit` events of `topic`, newest first."""
    return [
        EventRecord.from_row(row) for row in await conn.fetch(SELECT_RECENT_EVENTS, topic, limit)
    ]


async def search_statement(
    conn: Connection,
    *,
    since: datetime,
    until: datetime,
    topic: str | None,
    where: dict[str, Any] | None,
    after: tuple[datetime, str] | None,
    limit: int,
) -> tuple[str, list[Any]]:
    """The search statement and its arguments, with the ids bounding the partitions that can
    hold events created in `[since, until)` (give or take `ID_TIME_MARGIN`)."""
    low, high = await partition_store.id_span(
        conn, "ripple_events", since - ID_TIME_MARGIN, until + ID_TIME_MARGIN
    )
    at, event_id = after if after is not None else (None, None)
    args: list[Any] = [since, until, where, at, event_id, limit, low, high]
    if topic is not None:
        args.append(topic)
    return (SEARCH_EVENTS if topic is None else SEARCH_TOPIC_EVENTS), args


async def search_events(
    pool: Pool,
    *,
    since: datetime,
    until: datetime,
    topic: str | None,
    where: dict[str, Any] | None,
    after: tuple[datetime, str] | None,
    limit: int,
    plan_each: bool = True,
) -> list[EventRecord]:
    """Events of `[since, until)` (of `topic`) whose payload contains `where`, newest first,
    after the cursor `(created_at, id)`, reading only the partitions of the window.
    `plan_each=False` where statements are unnamed (behind a transaction pooler): those are
    planned for their values anyway."""

    async def search(conn: Connection) -> list[asyncpg.Record]:
        sql, args = await search_statement(
            conn, since=since, until=until, topic=topic, where=where, after=after, limit=limit
        )
        if plan_each:
            await conn.execute(PLAN_EACH_SEARCH)
        return await conn.fetch(sql, *args)

    if plan_each:
        async with transaction(pool) as conn:
            rows = await search(conn)
    else:
        async with pool.acquire() as conn:
            rows = await search(conn)
    return [EventRecord.from_row(row) for row in rows]
