"""SQL behind the gauges computed from Postgres: queue depth/age, failing webhooks (stranded
runs come from the workflow store through the `RunStats` port).

Read-only: these statements aggregate other concepts' tables and never change a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ripple.platform.core.db import Connection
from ripple.platform.ops.ports import StrandedGauge

__all__ = [
    "QUEUE_GAUGE_CAP",
    "QUEUE_GAUGE_QUEUES",
    "QueueGauge",
    "StrandedGauge",
    "WebhookGauge",
    "select_queue_gauges",
    "select_webhook_gauges",
]

#: Most live messages of one kind (ungrouped, grouped) a queue's depth counts, so a scrape costs
#: the same at any backlog; a depth of this many or more is a lower bound.
QUEUE_GAUGE_CAP: Final = 10_000
#: Most queues the gauges cover (in name order).
QUEUE_GAUGE_QUEUES: Final = 1_000

# $1 cap, $2 most queues. Every queue with a settings row or a live (non-dead) message, found
# by skip scans of the claim indexes (one probe per queue): its messages waiting or in flight,
# each kind counted through its partial index up to $1 (in the index's order, so the planner
# walks it), and the age of the oldest message
# visible now among the first $1 of each kind.
SELECT_QUEUE_GAUGES: Final = """
WITH RECURSIVE ready AS (
    (SELECT queue FROM ripple_queue_messages
     WHERE dead_at IS NULL AND group_id IS NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT m.queue FROM ripple_queue_messages m
            WHERE m.dead_at IS NULL AND m.group_id IS NULL AND m.queue > r.queue
            ORDER BY m.queue LIMIT 1)
    FROM ready r WHERE r.queue IS NOT NULL
),
grouped AS (
    (SELECT queue FROM ripple_queue_messages
     WHERE dead_at IS NULL AND group_id IS NOT NULL ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT m.queue FROM ripple_queue_messages m
            WHERE m.dead_at IS NULL AND m.group_id IS NOT NULL AND m.queue > g.queue
            ORDER BY m.queue LIMIT 1)
    FROM grouped g WHERE g.queue IS NOT NULL
),
names AS (
    SELECT queue FROM (
        (SELECT queue FROM ready WHERE queue IS NOT NULL LIMIT $2)
        UNION (SELECT queue FROM grouped WHERE queue IS NOT NULL LIMIT $2)
        UNION (SELECT name FROM ripple_queues ORDER BY name LIMIT $2)
    ) AS q
    ORDER BY queue LIMIT $2
)
SELECT n.queue,
       (SELECT count(*) FROM (
            SELECT 1 FROM ripple_queue_messages m
            WHERE m.queue = n.queue AND m.dead_at IS NULL AND m.group_id IS NULL
            ORDER BY m.visible_at LIMIT $1
        ) AS u)
       + (SELECT count(*) FROM (
            SELECT 1 FROM ripple_queue_messages m
            WHERE m.queue = n.queue AND m.dead_at IS NULL AND m.group_id IS NOT NULL
            ORDER BY m.group_id, m.id LIMIT $1
        ) AS g) AS depth,
       coalesce(extract(epoch FROM now() - least(
           (SELECT min(created_at) FROM (
                SELECT created_at FROM ripple_queue_messages m
                WHERE m.queue = n.queue AND m.dead_at IS NULL AND m.group_id IS NULL
                  AND m.visible_at <= now()
                ORDER BY m.visible_at LIMIT $1
            ) AS r),
           (SELECT min(created_at) FROM (
                SELECT created_at, visible_at FROM ripple_queue_messages m
                WHERE m.queue = n.queue AND m.dead_at IS NULL AND m.group_id IS NOT NULL
                ORDER BY m.group_id, m.id LIMIT $1
            ) AS h WHERE h.visible_at <= now())
       )), 0)::float8 AS oldest_age
FROM names n
"""

# No parameters. Webhook subscriptions with a health row: whether they are failing now.
SELECT_WEBHOOK_GAUGES: Final = """
SELECT h.subscription_id::text AS subscription_id, h.failing_since IS NOT NULL AS failing
FROM ripple_webhook_health h
JOIN ripple_subscriptions s ON s.id = h.subscription_id
"""


@dataclass(frozen=True, slots=True)
class QueueGauge:
    queue: str
    depth: int
    oldest_age: float

    @classmethod
    def from_row(cls, row: Any) -> QueueGauge:
        return cls(row["queue"], int(row["depth"]), float(row["oldest_age"]))


@dataclass(frozen=True, slots=True)
class WebhookGauge:
    subscription_id: str
    failing: bool

    @classmethod
    def from_row(cls, row: Any) -> WebhookGauge:
        return cls(row["subscription_id"], bool(row["failing"]))


async def select_queue_gauges(
    conn: Connection, cap: int = QUEUE_GAUGE_CAP, queues: int = QUEUE_GAUGE_QUEUES
) -> list[QueueGauge]:
    rows = await conn.fetch(SELECT_QUEUE_GAUGES, cap, queues)
    return [QueueGauge.from_row(row) for row in rows]


async def select_webhook_gauges(conn: Connection) -> list[WebhookGauge]:
    return [WebhookGauge.from_row(row) for row in await conn.fetch(SELECT_WEBHOOK_GAUGES)]
