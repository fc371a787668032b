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
    "QueueGauge",
    "StrandedGauge",
    "WebhookGauge",
    "select_queue_gauges",
    "select_webhook_gauges",
]

# No parameters. Every queue with a settings row or a live (non-dead) message: its messages
# waiting or in flight, and the age of its oldest message that is visible now.
SELECT_QUEUE_GAUGES: Final = """
WITH counts AS (
    SELECT queue,
           count(*) AS depth,
           min(created_at) FILTER (WHERE visible_at <= now()) AS oldest_visible
    FROM ripple_queue_messages
    WHERE dead_at IS NULL
    GROUP BY queue
)
SELECT coalesce(c.queue, q.name) AS queue,
       coalesce(c.depth, 0) AS depth,
       coalesce(extract(epoch FROM now() - c.oldest_visible), 0)::float8 AS oldest_age
FROM counts c
FULL JOIN ripple_queues q ON q.name = c.queue
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


async def select_queue_gauges(conn: Connection) -> list[QueueGauge]:
    return [QueueGauge.from_row(row) for row in await conn.fetch(SELECT_QUEUE_GAUGES)]


async def select_webhook_gauges(conn: Connection) -> list[WebhookGauge]:
    return [WebhookGauge.from_row(row) for row in await conn.fetch(SELECT_WEBHOOK_GAUGES)]
