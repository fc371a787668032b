"""The schedules' SQL (`ripple_schedules`, migration 0011) and row mapping. Every function takes
a connection so callers compose one transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

__all__ = ["ScheduleInfo"]

_COLUMNS: Final = (
    "name, workflow, topic, input, cron, every_seconds, timezone, overlap, paused, source, "
    "next_run_at, last_tick_at, last_run_id, created_at, updated_at"
)

# Create or replace a schedule; the next tick is kept unless the cadence changed, and a paused
# schedule stays paused. $1 name, $2 workflow, $3 topic, $4 input, $5 cron, $6 every_seconds,
# $7 timezone, $8 overlap, $9 source, $10 next tick
UPSERT_SCHEDULE: Final = f"""
INSERT INTO ripple_schedules AS s (name, workflow, topic, input, cron, every_seconds, timezone,
                                   overlap, source, next_run_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (name) DO UPDATE
SET workflow = excluded.workflow, topic = excluded.topic, input = excluded.input,
    cron = excluded.cron, every_seconds = excluded.every_seconds, timezone = excluded.timezone,
    overlap = excluded.overlap, source = excluded.source,
    next_run_at = CASE
        WHEN (s.cron, s.every_seconds, s.timezone)
             IS DISTINCT FROM (excluded.cron, excluded.every_seconds, excluded.timezone)
        THEN excluded.next_run_at ELSE s.next_run_at END,
    updated_at = now()
RETURNING {_COLUMNS}
"""  # noqa: S608

# $1 name
SELECT_SCHEDULE: Final = f"SELECT {_COLUMNS} FROM ripple_schedules WHERE name = $1"  # noqa: S608
SELECT_SCHEDULES: Final = f"SELECT {_COLUMNS} FROM ripple_schedules ORDER BY name"  # noqa: S608
# $1 name
LOCK_SCHEDULE: Final = f"""
SELECT {_COLUMNS}, now() AS db_now FROM ripple_schedules WHERE name = $1 FOR UPDATE
"""  # noqa: S608

# Due schedules no other scheduler holds, earliest first. $1 limit
LOCK_DUE_SCHEDULES: Final = f"""
SELECT {_COLUMNS}, now() AS db_now FROM ripple_schedules
WHERE NOT paused AND next_run_at <= now()
ORDER BY next_run_at
LIMIT $1
FOR UPDATE SKIP LOCKED
"""  # noqa: S608

# After firing (or skipping) a tick. $1 name, $2 next tick, $3 tick fired, $4 run id|NULL
ADVANCE_SCHEDULE: Final = """
UPDATE ripple_schedules
SET next_run_at = $2, last_tick_at = $3, last_run_id = coalesce($4, last_run_id),
    updated_at = now()
WHERE name = $1
"""

# A manual trigger's run. $1 name, $2 run id
SET_LAST_RUN: Final = """
UPDATE ripple_schedules SET last_run_id = $2, updated_at = now() WHERE name = $1
"""

# $1 name, $2 paused, $3 next tick (used when resuming: missed ticks do not fire)
SET_PAUSED: Final = f"""
UPDATE ripple_schedules
SET paused = $2, next_run_at = CASE WHEN $2 THEN next_run_at ELSE $3 END, updated_at = now()
WHERE name = $1
RETURNING {_COLUMNS}
"""  # noqa: S608

# $1 name
DELETE_SCHEDULE: Final = "DELETE FROM ripple_schedules WHERE name = $1 RETURNING name"

# Seconds until the next unpaused schedule is due (NULL: none; negative: due now).
NEXT_SCHEDULE_DUE: Final = """
SELECT extract(epoch FROM min(next_run_at) - clock_timestamp())::float8
FROM ripple_schedules WHERE NOT paused
"""


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A schedule as stored: what it fires, when, and what it fired last."""

    name: str
    workflow: str | None
    topic: str | None
    #: run input (workflow schedule) or event payload (topic schedule)
    input: Any
    cron: str | None
    every_seconds: float | None
    timezone: str
    overlap: str
    paused: bool
    #: "code" (declared on @workflow) or "api"
    source: str
    next_run_at: datetime
    last_tick_at: datetime | None
    last_run_id: str | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> ScheduleInfo:
        return cls(
            name=row["name"],
            workflow=row["workflow"],
            topic=row["topic"],
            input=row["input"],
            cron=row["cron"],
            every_seconds=row["every_seconds"],
            timezone=row["timezone"],
            overlap=row["overlap"],
            paused=row["paused"],
            source=row["source"],
            next_run_at=row["next_run_at"],
            last_tick_at=row["last_tick_at"],
            last_run_id=row["last_run_id"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )
