"""SQL for subscription backfills and event replays: the events they deliver, the backfill
ledger and the progress columns of a subscription (migration 0010); row mapping only.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from ripple.platform.core.db import Connection
from ripple.platform.events.fanout import PublishedEvent

__all__ = [
    "finish_backfill",
    "lock_backfill",
    "mark_backfilled",
    "next_backfill_events",
    "next_replay_events",
    "set_backfill",
]

# $1 subscription id, $2 since, $3 the subscription-set version that created it: the
# subscription enters backfill (in the creating transaction).
SET_BACKFILL: Final = """
UPDATE ripple_subscriptions SET backfill_since = $2, backfill_version = $3 WHERE id = $1
"""

# $1 subscription id: its backfill state, locked (one backfill runner at a time). No row when
# the subscription is gone.
LOCK_BACKFILL: Final = """
SELECT pattern, filter, kind, target, backfill_since, backfill_version, backfill_cursor_at,
       backfill_cursor_id, backfill_done_at, created_at, now() AS db_now
FROM ripple_subscriptions WHERE id = $1 FOR UPDATE
"""

# The next events a backfill delivers, after its cursor in (created_at, id) order: retained
# events since $2 whose topic the pattern and whose payload the filter match, that were matched
# against a subscription set older than the subscription (tagged < $3, or untagged: published
# before migration 0010).
# $1 limit, $2 since, $3 version, $4 exact topic|NULL, $5 anchored regex over '.' || topic|NULL,
# $6 filter|NULL, $7 cursor created_at|NULL, $8 cursor id|NULL
SELECT_BACKFILL_EVENTS: Final = """
SELECT e.id, e.topic, e.payload, e.trace, e.created_at, e.schema_version
FROM ripple_events e
WHERE e.created_at >= $2
  AND ($7::timestamptz IS NULL OR (e.created_at, e.id) > ($7, $8::uuid))
  AND (e.subscriptions_version IS NULL OR e.subscriptions_version < $3)
  AND (e.topic = $4 OR ('.' || e.topic) ~ $5)
  AND ($6::jsonb IS NULL OR e.payload @> $6::jsonb)
ORDER BY e.created_at, e.id
LIMIT $1
"""

# The last pass (under LOCK_EVENTS): the matching events (as above) not in the ledger, wherever
# they are relative to the cursor. A set difference (hashed), not an anti-join the planner could
# run as a nested loop over a ledger it has no statistics for (quadratic).
# $1 limit, $2 since, $3 version, $4 exact topic|NULL, $5 regex|NULL, $6 filter|NULL,
# $7 subscription id
SELECT_BACKFILL_MISSED: Final = """
WITH missed AS (
    SELECT e.id FROM ripple_events e
    WHERE e.created_at >= $2
      AND (e.subscriptions_version IS NULL OR e.subscriptions_version < $3)
      AND (e.topic = $4 OR ('.' || e.topic) ~ $5)
      AND ($6::jsonb IS NULL OR e.payload @> $6::jsonb)
    EXCEPT
    SELECT b.event_id FROM ripple_backfill_events b WHERE b.subscription_id = $7
)
SELECT e.id, e.topic, e.payload, e.trace, e.created_at, e.schema_version
FROM missed JOIN ripple_events e ON e.id = missed.id
ORDER BY e.created_at, e.id
LIMIT $1
"""

# $1 subscription id, $2 event ids uuid[], $3 count, $4 cursor created_at|NULL, $5 cursor id
# (NULL: keep the cursor; the last pass delivers behind it): record a delivered batch in the
# ledger and the subscription's progress.
MARK_BACKFILLED: Final = """
WITH ledger AS (
    INSERT INTO ripple_backfill_events (subscription_id, event_id)
    SELECT $1, unnest($2::uuid[])
)
UPDATE ripple_subscriptions
SET backfill_cursor_at = coalesce($4, backfill_cursor_at),
    backfill_cursor_id = coalesce($5::uuid, backfill_cursor_id),
    backfill_delivered = backfill_delivered + $3
WHERE id = $1
"""

# $1 subscription id: the backfill is complete; its ledger is no longer needed.
FINISH_BACKFILL: Final = """
WITH done AS (
    UPDATE ripple_subscriptions SET backfill_done_at = now() WHERE id = $1
)
DELETE FROM ripple_backfill_events WHERE subscription_id = $1
"""

# (no parameters) Wait for every transaction that inserted events to end, and hold new ones
# off until this transaction ends: the backfill's last batch sees every event matched against
# an older subscription set.
LOCK_EVENTS: Final = "LOCK TABLE ripple_events IN SHARE MODE"

# Events a replay re-delivers: created in [$2, $3), after the cursor ($4, $5), matching the
# pattern and filter, oldest first.
# $1 limit, $2 since, $3 until, $4 cursor created_at|NULL, $5 cursor id|NULL,
# $6 exact topic|NULL, $7 anchored regex|NULL, $8 filter|NULL
SELECT_REPLAY_EVENTS: Final = """
SELECT e.id, e.topic, e.payload, e.trace, e.created_at, e.schema_version
FROM ripple_events e
WHERE e.created_at >= $2 AND e.created_at < $3
  AND ($4::timestamptz IS NULL OR (e.created_at, e.id) > ($4, $5::uuid))
  AND (e.topic = $6 OR ('.' || e.topic) ~ $7)
  AND ($8::jsonb IS NULL OR e.payload @> $8::jsonb)
ORDER BY e.created_at, e.id
LIMIT $1
"""


def _events(rows: list[Any], replay_id: str | None = None) -> list[PublishedEvent]:
    return [
        PublishedEvent(
            str(row["id"]),
            row["topic"],
            row["payload"],
            row["created_at"],
            row["trace"],
            replay_id,
            schema_version=row["schema_version"],
        )
        for row in rows
    ]


async def set_backfill(
    conn: Connection, subscription_id: str, since: datetime, version: int
) -> None:
    await conn.execute(SET_BACKFILL, subscription_id, since, version)


async def lock_backfill(conn: Connection, subscription_id: str) -> Any:
    """The subscription's backfill state, locked for this transaction (None: no such row)."""
    return await conn.fetchrow(LOCK_BACKFILL, subscription_id)


async def next_backfill_events(
    conn: Connection,
    subscription_id: str,
    since: datetime,
    version: int,
    exact: str | None,
    regex: str | None,
    filter: dict[str, Any] | None,
    limit: int,
    *,
    cursor: tuple[datetime, Any] | None,
    missed: bool,
) -> list[PublishedEvent]:
    """The next batch after `cursor`, or (`missed`) the matching events not yet delivered."""
    if missed:
        rows = await conn.fetch(
            SELECT_BACKFILL_MISSED, limit, since, version, exact, regex, filter, subscription_id
        )
    else:
        at, last = cursor if cursor is not None else (None, None)
        rows = await conn.fetch(
            SELECT_BACKFILL_EVENTS, limit, since, version, exact, regex, filter, at, last
        )
    return _events(rows)


async def mark_backfilled(
    conn: Connection, subscription_id: str, events: list[PublishedEvent], *, advance: bool
) -> None:
    """Ledger a delivered batch; `advance`: it is the next in cursor order (its last event
    becomes the cursor)."""
    last = events[-1]
    await conn.execute(
        MARK_BACKFILLED,
        subscription_id,
        [e.event_id for e in events],
        len(events),
        last.created_at if advance else None,
        last.event_id if advance else None,
    )


async def finish_backfill(conn: Connection, subscription_id: str) -> None:
    await conn.execute(FINISH_BACKFILL, subscription_id)


async def lock_events(conn: Connection) -> None:
    await conn.execute(LOCK_EVENTS)


async def next_replay_events(
    conn: Connection,
    limit: int,
    since: datetime,
    until: datetime,
    cursor: tuple[datetime, str] | None,
    exact: str | None,
    regex: str | None,
    filter: dict[str, Any] | None,
    replay_id: str,
) -> list[PublishedEvent]:
    at, last = cursor if cursor is not None else (None, None)
    rows = await conn.fetch(
        SELECT_REPLAY_EVENTS, limit, since, until, at, last, exact, regex, filter
    )
    return _events(rows, replay_id)
