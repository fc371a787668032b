"""SQL of the retention sweeper beside partition drops (platform/ops/partitions.py): the
idempotency keys of dropped events and the deduplication ids of dropped queue dead letters, in
bounded batches. The workflow tables are swept by their
owner, through the `RunRetention` port.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from ripple.platform.core.db import Connection

__all__ = ["delete_dead_keys_before", "delete_event_keys_before"]

# $1 the lower bound of the oldest event partition, $2 batch size: the idempotency keys of
# events made before it, whose partitions retention dropped; the keys become reusable.
DELETE_EVENT_KEYS_BEFORE: Final = """
DELETE FROM ripple_event_keys WHERE idempotency_key IN (
    SELECT idempotency_key FROM ripple_event_keys
    WHERE event_id < ripple_uuid7_floor($1::timestamptz) LIMIT $2
)
"""

# $1 time, $2 batch: the deduplication ids of queue dead letters that died before then (their
# partitions are dropped).
DELETE_DEAD_KEYS_BEFORE: Final = """
DELETE FROM ripple_queue_dead_keys WHERE (queue, deduplication_id) IN (
    SELECT queue, deduplication_id FROM ripple_queue_dead_keys WHERE dead_at < $1 LIMIT $2
)
"""


def _count(status: str) -> int:
    """Rows affected, from a command tag such as `DELETE 500`."""
    return int(status.rsplit(" ", 1)[-1])


async def delete_dead_keys_before(conn: Connection, before: datetime, batch: int) -> int:
    """Delete at most `batch` deduplication ids of dead letters that died before `before`."""
    return _count(await conn.execute(DELETE_DEAD_KEYS_BEFORE, before, batch))


async def delete_event_keys_before(conn: Connection, before: datetime, batch: int) -> int:
    """Delete at most `batch` idempotency keys of events made before `before`."""
    return _count(await conn.execute(DELETE_EVENT_KEYS_BEFORE, before, batch))
