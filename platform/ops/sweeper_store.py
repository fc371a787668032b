"""SQL of the retention sweeper for events and webhook deliveries: bounded, `SKIP LOCKED` batch
deletes. Each statement deletes at most one batch and reports what it deleted; the sweeper
loops. The workflow tables are swept by their owner, through the `RunRetention` port.
"""

from __future__ import annotations

from typing import Final

from ripple.platform.core.db import Connection

__all__ = [
    "delete_old_events",
    "delete_old_webhook_attempts",
    "delete_old_webhook_deliveries",
]

# $1 event retention in seconds, $2 batch size. Oldest events first.
DELETE_OLD_EVENTS: Final = """
WITH doomed AS (
    SELECT id FROM ripple_events
    WHERE created_at < now() - make_interval(secs => $1)
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM ripple_events e USING doomed d WHERE e.id = d.id
"""

# $1 retention in seconds, $2 batch size.
# doomed: delivered or failed (dead-lettered) deliveries last changed before the cutoff; their
# attempt log goes with them (deleted explicitly, so it is counted).
DELETE_OLD_WEBHOOK_DELIVERIES: Final = """
WITH doomed AS (
    SELECT id FROM ripple_webhook_deliveries
    WHERE status IN ('delivered', 'failed')
      AND updated_at < now() - make_interval(secs => $1)
    ORDER BY updated_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), attempts AS (
    DELETE FROM ripple_webhook_attempts a USING doomed d WHERE a.delivery_id = d.id RETURNING 1
), deliveries AS (
    DELETE FROM ripple_webhook_deliveries w USING doomed d WHERE w.id = d.id RETURNING 1
)
SELECT (SELECT count(*) FROM deliveries) AS deliveries,
       (SELECT count(*) FROM attempts) AS attempts
"""

# $1 retention in seconds, $2 batch size. Attempt log rows older than the cutoff, also of
# deliveries still pending (a delivery retried for longer than the retention keeps its recent
# attempts only).
DELETE_OLD_WEBHOOK_ATTEMPTS: Final = """
WITH doomed AS (
    SELECT id FROM ripple_webhook_attempts
    WHERE started_at < now() - make_interval(secs => $1)
    ORDER BY started_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM ripple_webhook_attempts a USING doomed d WHERE a.id = d.id
"""


def _count(status: str) -> int:
    """Rows affected, from a command tag such as `DELETE 500`."""
    return int(status.rsplit(" ", 1)[-1])


async def delete_old_events(conn: Connection, retention: float, batch: int) -> int:
    return _count(await conn.execute(DELETE_OLD_EVENTS, retention, batch))


async def delete_old_webhook_deliveries(
    conn: Connection, retention: float, batch: int
) -> dict[str, int]:
    row = await conn.fetchrow(DELETE_OLD_WEBHOOK_DELIVERIES, retention, batch)
    assert row is not None
    return {"webhook_deliveries": int(row["deliveries"]), "webhook_attempts": int(row["attempts"])}


async def delete_old_webhook_attempts(conn: Connection, retention: float, batch: int) -> int:
    return _count(await conn.execute(DELETE_OLD_WEBHOOK_ATTEMPTS, retention, batch))
