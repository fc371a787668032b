"""SQL for subscriptions and the subscription-set version counter; row mapping only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import asyncpg

from ripple.platform.core.db import Connection

__all__ = [
    "SubscriptionRecord",
    "bump_version",
    "delete_subscription",
    "get_subscription",
    "insert_subscription",
    "list_subscriptions",
    "read_version",
    "set_status",
]

_COLUMNS: Final = (
    "id, pattern, kind, target, filter, status, status_reason, created_at, updated_at, "
    "backfill_since, backfill_delivered, backfill_done_at"
)

# $1 id, $2 pattern, $3 kind, $4 target, $5 filter
INSERT_SUBSCRIPTION: Final = f"""
INSERT INTO ripple_subscriptions (id, pattern, kind, target, filter)
VALUES ($1, $2, $3, $4, $5)
RETURNING {_COLUMNS}
"""  # noqa: S608
# $1 id
SELECT_SUBSCRIPTION: Final = f"""
SELECT {_COLUMNS}
FROM ripple_subscriptions WHERE id = $1
"""  # noqa: S608
# (no parameters) every subscription, oldest first (ids are time-ordered)
SELECT_SUBSCRIPTIONS: Final = f"""
SELECT {_COLUMNS}
FROM ripple_subscriptions ORDER BY id
"""  # noqa: S608
# $1 id
DELETE_SUBSCRIPTION: Final = "DELETE FROM ripple_subscriptions WHERE id = $1 RETURNING id"
# $1 id, $2 new status, $3 reason
UPDATE_STATUS: Final = f"""
UPDATE ripple_subscriptions SET status = $2, status_reason = $3, updated_at = now()
WHERE id = $1
RETURNING {_COLUMNS}
"""  # noqa: S608
# $1 subscription id, $2 reason: disables it unless it is disabled already
DISABLE: Final = """
UPDATE ripple_subscriptions
SET status = 'disabled', status_reason = $2, updated_at = now()
WHERE id = $1 AND status <> 'disabled'
RETURNING id
"""
# (no parameters) bump the version in the caller's transaction; returns the new version
BUMP_VERSION: Final = """
UPDATE ripple_subscription_version SET version = version + 1 WHERE singleton RETURNING version
"""
# (no parameters)
SELECT_VERSION: Final = "SELECT version FROM ripple_subscription_version WHERE singleton"


@dataclass(frozen=True, slots=True)
class SubscriptionRecord:
    """One subscription row."""

    id: str
    pattern: str
    kind: str
    target: dict[str, Any]
    filter: dict[str, Any] | None
    status: str
    status_reason: str | None
    created_at: datetime
    updated_at: datetime
    #: Backfill (subscribe with backfill_since): from when, events delivered so far, and when
    #: it finished (None while it runs).
    backfill_since: datetime | None = None
    backfill_delivered: int = 0
    backfill_done_at: datetime | None = None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> SubscriptionRecord:
        return cls(
            id=str(row["id"]),
            pattern=row["pattern"],
            kind=row["kind"],
            target=row["target"],
            filter=row["filter"],
            status=row["status"],
            status_reason=row["status_reason"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            backfill_since=row["backfill_since"],
            backfill_delivered=row["backfill_delivered"],
            backfill_done_at=row["backfill_done_at"],
        )


async def insert_subscription(
    conn: Connection,
    subscription_id: str,
    pattern: str,
    kind: str,
    target: dict[str, Any],
    filter: dict[str, Any] | None,
) -> SubscriptionRecord:
    row = await conn.fetchrow(INSERT_SUBSCRIPTION, subscription_id, pattern, kind, target, filter)
    assert row is not None
    return SubscriptionRecord.from_row(row)


async def get_subscription(conn: Connection, subscription_id: str) -> SubscriptionRecord | None:
    row = await conn.fetchrow(SELECT_SUBSCRIPTION, subscription_id)
    return None if row is None else SubscriptionRecord.from_row(row)


async def list_subscriptions(conn: Connection) -> list[SubscriptionRecord]:
    return [SubscriptionRecord.from_row(row) for row in await conn.fetch(SELECT_SUBSCRIPTIONS)]


async def delete_subscription(conn: Connection, subscription_id: str) -> bool:
    return await conn.fetchval(DELETE_SUBSCRIPTION, subscription_id) is not None


async def set_status(
    conn: Connection, subscription_id: str, status: str, reason: str | None
) -> SubscriptionRecord | None:
    """Set a subscription's status (`active`, `paused`, `disabled`); None if it does not exist.

    Callers must also `bump_version` in the same transaction.
    """
    row = await conn.fetchrow(UPDATE_STATUS, subscription_id, status, reason)
    return None if row is None else SubscriptionRecord.from_row(row)


async def disable(conn: Connection, subscription_id: str, reason: str) -> bool:
    """Disable a subscription with a reason; False if it was disabled already or is gone.

    Callers must also `bump_version` in the same transaction.
    """
    return await conn.fetchval(DISABLE, subscription_id, reason) is not None


async def bump_version(conn: Connection) -> int:
    """Mark the subscription set changed (call in the transaction that changes it)."""
    return int(await conn.fetchval(BUMP_VERSION))


async def read_version(conn: Connection) -> int:
    return int(await conn.fetchval(SELECT_VERSION))
