"""Read-only data the dashboard needs beyond the `Client`'s calls.

Everything else (runs, steps, events, explain, deliveries, dead letters, subscriptions,
schedules) goes through the `Client`. The workflow tables are read through their owner,
`ripple.workflows.store` (its `views` module: bounded run counts, the stranded sample, a run's
first steps, waits, signals and trace, a schedule's runs) and a queue's counts through theirs,
`ripple.subscribers.queues.queue_store`; the SQL here covers queue names and messages and
webhook deliveries. Every read is indexed and bounded, so a page view costs the same with
millions of rows: queue names and counts walk partial indexes with limits (skip scans for the
distinct queues); the trace lookups use the unique keys fan-out writes (queue deduplication id,
(event, subscription) of a delivery, (workflow, idempotency key) of a run).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final
from uuid import UUID

from ripple.platform.core.db import Pool, map_errors
from ripple.platform.core.ids import id_time_floor
from ripple.platform.ops.ports import StrandedGauge
from ripple.subscribers.queues import queue_store
from ripple.workflows import store as wf_store
from ripple.workflows.runs.records import StepRecord
from ripple.workflows.store import views
from ripple.workflows.store.views import WaitRow

__all__ = [
    "QUEUE_CAP",
    "STRANDED_PER_WORKFLOW",
    "STRANDED_WORKFLOWS",
    "PeekedMessage",
    "QueueCounts",
    "QueueMessageRow",
    "RecentRuns",
    "WaitRow",
    "delivery_id_for",
    "is_uuid",
    "peek_messages",
    "pending_signals",
    "pending_waits",
    "queue_counts",
    "queue_message_for",
    "queue_names",
    "recent_runs",
    "run_id_for",
    "run_steps",
    "run_trace_id",
    "schedule_runs",
    "stranded_sample",
    "uuid7_floor",
]

#: Most messages of one kind a queue count reads; a count that reaches it is shown as "≥".
QUEUE_CAP: Final = queue_store.STATS_CAP
#: Active runs per workflow, and workflows, the overview's stranded-runs check reads at most.
STRANDED_PER_WORKFLOW: Final = 100
STRANDED_WORKFLOWS: Final = 50


# $1 limit: names of queues with live or dead messages, or settings. Each kind of message is a
# skip scan of its partial index (one probe per queue), not a scan of the messages.
SELECT_QUEUE_NAMES: Final = """
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
dead AS (
    (SELECT queue FROM ripple_queue_dead_letters ORDER BY queue LIMIT 1)
    UNION ALL
    SELECT (SELECT m.queue FROM ripple_queue_dead_letters m
            WHERE m.queue > d.queue ORDER BY m.queue LIMIT 1)
    FROM dead d WHERE d.queue IS NOT NULL
)
SELECT queue FROM (
    (SELECT queue FROM ready WHERE queue IS NOT NULL LIMIT $1)
    UNION (SELECT queue FROM grouped WHERE queue IS NOT NULL LIMIT $1)
    UNION (SELECT queue FROM dead WHERE queue IS NOT NULL LIMIT $1)
    UNION (SELECT name FROM ripple_queues ORDER BY name LIMIT $1)
) AS q
ORDER BY queue
LIMIT $1
"""

# $1 queue, $2 deduplication id (fan-out writes "{event_id}:{subscription_id}")
SELECT_QUEUE_MESSAGE: Final = """
SELECT id, queue, receive_count, visible_at, NULL::timestamptz AS dead_at, created_at,
       visible_at <= now() AS visible_now
FROM ripple_queue_messages
WHERE queue = $1 AND deduplication_id = $2
UNION ALL
SELECT d.id, d.queue, d.receive_count, d.dead_at AS visible_at, d.dead_at, d.created_at, false
FROM ripple_queue_dead_keys k
JOIN ripple_queue_dead_letters d
    ON d.queue = k.queue AND d.id = k.message_id AND d.dead_at = k.dead_at
WHERE k.queue = $1 AND k.deduplication_id = $2
"""

# $1 event id, $2 subscription id, $3 the lowest id of the event's millisecond: a delivery's id
# is never older than its event, so the partitions of older days are pruned.
SELECT_DELIVERY_ID: Final = """
SELECT id::text FROM ripple_webhook_deliveries
WHERE event_id = $1 AND subscription_id = $2 AND id >= $3::uuid
"""


# $1 queue, $2 limit: the live (not dead-lettered) messages next in claim order, read-only:
# ungrouped ones by visibility and FIFO groups by id, each through its claim index.
SELECT_PEEK: Final = """
SELECT * FROM (
    (SELECT id, body, headers, group_id, receive_count, visible_at, created_at,
            visible_at <= now() AS visible_now
     FROM ripple_queue_messages
     WHERE queue = $1 AND dead_at IS NULL AND group_id IS NULL
     ORDER BY visible_at LIMIT $2)
    UNION ALL
    (SELECT id, body, headers, group_id, receive_count, visible_at, created_at,
            visible_at <= now() AS visible_now
     FROM ripple_queue_messages
     WHERE queue = $1 AND dead_at IS NULL AND group_id IS NOT NULL
     ORDER BY group_id, id LIMIT $2)
) AS m
ORDER BY visible_at, id
LIMIT $2
"""


@dataclass(frozen=True, slots=True)
class QueueCounts:
    """A queue's counts for the dashboard, read from bounded samples: the counts named in
    `lower_bounds` came from a sample that reached QUEUE_CAP, so there may be more."""

    visible: int
    in_flight: int
    delayed: int
    dead_letters: int
    #: Seconds since the oldest visible message was sent (0 when none), as `QueueStats` has it.
    oldest_age: float
    lower_bounds: frozenset[str] = frozenset()

    @property
    def depth(self) -> int:
        return self.visible + self.in_flight + self.delayed

    def shown(self, name: str) -> str:
        """The count `name` (or "depth") for display: "≥ n" when it is a lower bound."""
        value: int = getattr(self, name)
        bounded = name in self.lower_bounds or (name == "depth" and bool(self.lower_bounds))
        return f"≥ {value}" if bounded else str(value)


@dataclass(frozen=True, slots=True)
class PeekedMessage:
    """A live queue message as the queues page shows it (nothing is received or changed)."""

    id: int
    body: Any
    headers: dict[str, Any]
    group_id: str | None
    receive_count: int
    visible_at: datetime
    created_at: datetime
    visible_now: bool

    @property
    def state(self) -> str:
        if self.visible_now:
            return "waiting"
        return "in flight" if self.receive_count > 0 else "delayed"


@dataclass(frozen=True, slots=True)
class QueueMessageRow:
    id: int
    queue: str
    receive_count: int
    visible_at: datetime
    dead_at: datetime | None
    created_at: datetime
    visible_now: bool

    @property
    def state(self) -> str:
        """dead, in flight, delayed or waiting."""
        if self.dead_at is not None:
            return "dead letter"
        if self.visible_now:
            return "waiting"
        return "in flight" if self.receive_count > 0 else "delayed"


def uuid7_floor(when: datetime) -> str:
    """The lowest uuid7 text created at `when` (ids compare as text in time order)."""
    hex_ms = f"{int(when.timestamp() * 1000) & ((1 << 48) - 1):012x}"
    return f"{hex_ms[:8]}-{hex_ms[8:]}-0000-0000-000000000000"


@dataclass(frozen=True, slots=True)
class RecentRuns:
    """Exact run counts of a window, by the minute the runs were created in."""

    #: `{workflow: {status: n}}` over the whole window, and over its last `recent` part.
    counts: dict[str, dict[str, int]]
    recent_counts: dict[str, dict[str, int]]
    #: Runs created and failed per equal bucket of the recent part, oldest bucket first.
    created: list[int]
    failed: list[int]


async def recent_runs(
    pool: Pool, since: datetime, recent: timedelta, buckets: int, now: datetime
) -> RecentRuns:
    """Run counts by workflow, status and time since `since`, from the run count rollup
    (whole minutes: the window starts at the minute of `since`, the recent part at the minute
    of `now - recent`)."""
    width = recent.total_seconds() / buckets
    with map_errors():
        rows = await views.count_runs_by_minute(
            pool, since=since, recent_since=now - recent, bucket_seconds=width
        )
    counts: dict[str, dict[str, int]] = {}
    recent_counts: dict[str, dict[str, int]] = {}
    created, failed = [0] * buckets, [0] * buckets
    for row in rows:
        workflow, status, bucket, n = row
        by = counts.setdefault(workflow, {})
        by[status] = by.get(status, 0) + n
        if bucket is not None:
            by = recent_counts.setdefault(workflow, {})
            by[status] = by.get(status, 0) + n
            index = min(max(bucket, 0), buckets - 1)  # clock skew: runs stamped after `now`
            created[index] += n
            if status == "failed":
                failed[index] += n
    return RecentRuns(counts, recent_counts, created, failed)


async def queue_message_for(pool: Pool, queue: str, dedup_id: str) -> QueueMessageRow | None:
    with map_errors():
        row = await pool.fetchrow(SELECT_QUEUE_MESSAGE, queue, dedup_id)
    return None if row is None else QueueMessageRow(**dict(row))


async def peek_messages(pool: Pool, queue: str, limit: int) -> list[PeekedMessage]:
    """The first `limit` live messages of `queue` in claim order (read-only)."""
    with map_errors():
        rows = await pool.fetch(SELECT_PEEK, queue, limit)
    return [PeekedMessage(**dict(row)) for row in rows]


async def queue_names(pool: Pool, limit: int) -> list[str]:
    """The first `limit` queues by name with messages (live or dead) or settings."""
    with map_errors():
        return [row["queue"] for row in await pool.fetch(SELECT_QUEUE_NAMES, limit)]


async def queue_counts(pool: Pool, queue: str) -> QueueCounts:
    """Bounded counts of one queue (each at most QUEUE_CAP), read by the queues' own stats."""
    with map_errors():
        async with pool.acquire() as conn:
            stats = await queue_store.stats(conn, queue, QUEUE_CAP)
    return QueueCounts(
        visible=stats.visible,
        in_flight=stats.in_flight,
        delayed=stats.delayed,
        dead_letters=stats.dead_letters,
        oldest_age=stats.oldest_age,
        lower_bounds=stats.lower_bounds - {"depth"},
    )


async def delivery_id_for(pool: Pool, event_id: str, subscription_id: str) -> str | None:
    with map_errors():
        try:
            floor = id_time_floor(int(event_id.replace("-", "")[:12], 16))
        except ValueError:
            return None
        found: str | None = await pool.fetchval(
            SELECT_DELIVERY_ID, event_id, subscription_id, floor
        )
    return found


async def run_id_for(pool: Pool, workflow: str, idempotency_key: str) -> str | None:
    with map_errors():
        return await wf_store.find_run_by_key(
            pool, workflow=workflow, idempotency_key=idempotency_key
        )


async def run_steps(pool: Pool, run_id: str, limit: int) -> tuple[list[StepRecord], bool]:
    """The run's first `limit` journal entries in call order, and whether there are more."""
    with map_errors():
        steps = await views.select_first_steps(pool, run_id=run_id, limit=limit + 1)
    return steps[:limit], len(steps) > limit


async def pending_waits(pool: Pool, run_id: str) -> list[WaitRow]:
    with map_errors():
        return await views.select_open_waits(pool, run_id=run_id)


async def pending_signals(pool: Pool, run_id: str, limit: int = 50) -> list[dict[str, Any]]:
    with map_errors():
        return await views.select_buffered_signals(pool, run_id=run_id, limit=limit)


async def run_trace_id(pool: Pool, run_id: str) -> str | None:
    """The W3C trace id the run was started under, if tracing was on."""
    with map_errors():
        trace = await views.read_run_trace(pool, run_id=run_id)
    parts = str(trace.get("traceparent", "")).split("-") if isinstance(trace, dict) else []
    return parts[1] if len(parts) > 2 else None


async def schedule_runs(
    pool: Pool, workflow: str, schedule: str, limit: int
) -> list[dict[str, Any]]:
    """The newest `limit` runs a workflow schedule started (by tick or trigger)."""
    with map_errors():
        return await views.select_schedule_runs(
            pool, workflow=workflow, schedule=schedule, limit=limit
        )


def is_uuid(value: str) -> bool:
    try:
        UUID(value)
    except ValueError:
        return False
    return True


async def stranded_sample(pool: Pool, live_seconds: float) -> list[StrandedGauge]:
    """Stranded runs among the STRANDED_PER_WORKFLOW active runs due soonest of each of the
    first STRANDED_WORKFLOWS workflows (by name) with active runs."""
    with map_errors():
        return await views.select_stranded_sample(
            pool,
            live_seconds=live_seconds,
            per_workflow=STRANDED_PER_WORKFLOW,
            workflows=STRANDED_WORKFLOWS,
        )
