"""The audit trail's SQL (`ripple_audit`, migration 0018). Every function takes a connection:
an action records its audit row in its own transaction, so the two commit or fail together."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ripple.platform.access.actors import current_actor
from ripple.platform.core.db import Connection
from ripple.platform.core.ids import uuid7

__all__ = ["ACTIONS", "AuditRow", "add_to_count", "delete_old_audit", "list_audit", "record"]

#: Every audited action name: `record` refuses any other, so each one written can be listed.
ACTIONS: tuple[str, ...] = (
    "run.cancel",
    "run.retry",
    "run.fork",
    "run.signal",
    "run.wake",
    "runs.cancel_many",
    "runs.retry_many",
    "delivery.redrive",
    "endpoint.resume",
    "subscription.create",
    "subscription.delete",
    "subscription.pause",
    "subscription.resume",
    "subscription.replay",
    "schedule.create",
    "schedule.pause",
    "schedule.resume",
    "schedule.trigger",
    "schedule.delete",
    "topic.schema.register",
    "token.create",
    "token.revoke",
    "approval.decide",
)

# $1 id, $2 actor, $3 token_id, $4 action, $5 target, $6 request_id, $7 details
_INSERT: Final = """
INSERT INTO ripple_audit (id, actor, token_id, action, target, request_id, details)
VALUES ($1, $2, $3, $4, $5, $6, $7)
"""

# $1 id, $2 how many more: a bulk action walking batches keeps its one row's count exact,
# each batch adding its rows in the batch's own transaction.
_ADD_TO_COUNT: Final = """
UPDATE ripple_audit
SET details = jsonb_set(details, '{count}', to_jsonb(COALESCE((details->>'count')::bigint, 0) + $2))
WHERE id = $1
"""

# Newest first by the UUIDv7 primary key. $1 since (or null), $2 action (or null),
# $3 cursor: the last id of the previous page (or null), $4 limit.
_LIST: Final = """
SELECT id, at, actor, token_id, action, target, request_id, details
FROM ripple_audit
WHERE ($1::timestamptz IS NULL OR at >= $1)
  AND ($2::text IS NULL OR action = $2)
  AND ($3::uuid IS NULL OR id < $3)
ORDER BY id DESC
LIMIT $4
"""

# $1 retention in seconds, $2 batch size. Rows are locked SKIP LOCKED so sweepers share work.
_DELETE_OLD: Final = """
WITH doomed AS (
    SELECT id FROM ripple_audit
    WHERE at < now() - make_interval(secs => $1)
    ORDER BY id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM ripple_audit a USING doomed WHERE a.id = doomed.id
"""


@dataclass(frozen=True, slots=True)
class AuditRow:
    """One stored audit row."""

    id: str
    at: datetime
    actor: str
    token_id: str | None
    action: str
    target: str | None
    request_id: str | None
    details: dict[str, Any]

    @classmethod
    def from_row(cls, row: Any) -> AuditRow:
        return cls(
            id=str(row["id"]),
            at=row["at"],
            actor=row["actor"],
            token_id=row["token_id"],
            action=row["action"],
            target=row["target"],
            request_id=row["request_id"],
            details=dict(row["details"] or {}),
        )


async def record(
    conn: Connection,
    action: str,
    target: str | None = None,
    details: dict[str, Any] | None = None,
) -> str:
    """Write one audit row for `action` on `target`, as the current actor, on `conn`; its id.

    Call it inside the action's transaction: a failing insert rolls the action back.
    Raises ValueError for an action not in `ACTIONS` (the listing could not filter on it).
    """
    if action not in ACTIONS:
        raise ValueError(f"audit action {action!r} is not in audit_store.ACTIONS")
    actor = current_actor()
    audit_id = uuid7()
    await conn.execute(
        _INSERT,
        audit_id,
        actor.name,
        actor.token_id,
        action,
        target,
        actor.request_id,
        details or {},
    )
    return str(audit_id)


async def add_to_count(conn: Connection, audit_id: str, count: int) -> None:
    """Add `count` to the `details.count` of row `audit_id` (a bulk action's next batch)."""
    await conn.execute(_ADD_TO_COUNT, audit_id, count)


async def list_audit(
    conn: Connection,
    *,
    since: datetime | None,
    action: str | None,
    before_id: str | None,
    limit: int,
) -> list[AuditRow]:
    """At most `limit` rows newest first, at or after `since`, of `action`, older than
    `before_id`."""
    rows = await conn.fetch(_LIST, since, action, before_id, limit)
    return [AuditRow.from_row(row) for row in rows]


async def delete_old_audit(conn: Connection, *, retention: float, batch: int) -> int:
    """Delete one batch (at most `batch`) of rows older than `retention` seconds; how many."""
    status: str = await conn.execute(_DELETE_OLD, retention, batch)
    return int(status.rsplit(" ", 1)[-1])
