"""SQL for published events; row mapping only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import asyncpg

from ripple.platform.db import Connection

__all__ = [
    "EventRecord",
    "find_event_by_key",
    "find_events_by_keys",
    "get_event",
    "insert_event",
    "insert_events",
    "matching_wait_runs",
    "topics_with_waits",
]

# $1 id, $2 topic, $3 payload, $4 idempotency key (NULL: none), $5 trace context
# A repeated idempotency key inserts nothing and returns no row.
INSERT_EVENT: Final = """
INSERT INTO ripple_events (id, topic, payload, idempotency_key, trace)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING created_at
"""
# $1 ids uuid[], $2 topics text[], $3 payloads jsonb[], $4 idempotency keys text[] (NULL
# elements: none), $5 traces jsonb[], $6 subscription-set versions bigint[] (what each event
# was matched against). Events whose key exists already (or repeats earlier in the batch) are
# skipped and not returned.
INSERT_EVENTS: Final = """
INSERT INTO ripple_events (id, topic, payload, idempotency_key, trace, subscriptions_version)
SELECT * FROM unnest($1::uuid[], $2::text[], $3::jsonb[], $4::text[], $5::jsonb[], $6::bigint[])
ON CONFLICT (idempotency_key) DO NOTHING
RETURNING id, created_at
"""
# $1 idempotency keys text[]
SELECT_EVENTS_BY_KEYS: Final = """
SELECT id, idempotency_key FROM ripple_events WHERE idempotency_key = ANY($1::text[])
"""
# $1 topics text[]: which of them some workflow wait listens to (read-only probe that spares
# the wait resolver's statements for topics nobody waits on)
SELECT_TOPICS_WITH_WAITS: Final = """
SELECT DISTINCT event FROM ripple_waits WHERE event = ANY($1::text[])
"""
# $1 idempotency key
SELECT_EVENT_BY_KEY: Final = "SELECT id FROM ripple_events WHERE idempotency_key = $1"
# $1 id
SELECT_EVENT: Final = """
SELECT id, topic, payload, idempotency_key, trace, created_at FROM ripple_events WHERE id = $1
"""

# $1 topic, $2 payload: runs whose workflow waits an event would resolve (read-only, for
# explain; the table belongs to the workflow runtime, see infra/sql/0002_workflows.sql)
SELECT_MATCHING_WAIT_RUNS: Final = """
SELECT DISTINCT run_id FROM ripple_waits
WHERE event = $1 AND (match IS NULL OR $2::jsonb @> match)
ORDER BY run_id
"""


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One stored event."""

    id: str
    topic: str
    payload: Any
    idempotency_key: str | None
    trace: dict[str, str] | None
    created_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> EventRecord:
        return cls(
            id=str(row["id"]),
            topic=row["topic"],
            payload=row["payload"],
            idempotency_key=row["idempotency_key"],
            trace=row["trace"],
            created_at=row["created_at"],
        )


async def insert_event(
    conn: Connection,
    event_id: str,
    topic: str,
    payload: Any,
    idempotency_key: str | None,
    trace: dict[str, str] | None,
) -> datetime | None:
    """Insert the event; its creation time, or None when the idempotency key already exists."""
    created: datetime | None = await conn.fetchval(
        INSERT_EVENT, event_id, topic, payload, idempotency_key, trace
    )
    return created


async def find_event_by_key(conn: Connection, idempotency_key: str) -> str | None:
    """The id of the event published with `idempotency_key`, if any."""
    found = await conn.fetchval(SELECT_EVENT_BY_KEY, idempotency_key)
    return None if found is None else str(found)


async def get_event(conn: Connection, event_id: str) -> EventRecord | None:
    row = await conn.fetchrow(SELECT_EVENT, event_id)
    return None if row is None else EventRecord.from_row(row)


async def matching_wait_runs(conn: Connection, topic: str, payload: Any) -> list[str]:
    """Ids of runs with a wait that an event on `topic` with `payload` would resolve."""
    return [
        str(row["run_id"]) for row in await conn.fetch(SELECT_MATCHING_WAIT_RUNS, topic, payload)
    ]


async def insert_events(
    conn: Connection,
    ids: list[str],
    topics: list[str],
    payloads: list[Any],
    keys: list[str | None],
    traces: list[dict[str, str] | None],
    versions: list[int | None] | None = None,
) -> dict[str, datetime]:
    """Insert events; creation time by id of those inserted (repeated keys are left out)."""
    if versions is None:
        versions = [None] * len(ids)
    rows = await conn.fetch(INSERT_EVENTS, ids, topics, payloads, keys, traces, versions)
    return {str(row["id"]): row["created_at"] for row in rows}


async def find_events_by_keys(conn: Connection, keys: list[str]) -> dict[str, str]:
    """Event id by idempotency key, for the keys that exist."""
    rows = await conn.fetch(SELECT_EVENTS_BY_KEYS, keys)
    return {row["idempotency_key"]: str(row["id"]) for row in rows}


async def topics_with_waits(conn: Connection, topics: list[str]) -> set[str]:
    """The subset of `topics` that some workflow wait listens to."""
    return {row["event"] for row in await conn.fetch(SELECT_TOPICS_WITH_WAITS, topics)}
