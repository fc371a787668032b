"""Read-only views of the workflow tables for the dashboard (platform/ui): bounded reads that
cost the same with millions of rows. Run counts read the per-minute rollup (migration 0017),
exact whatever the number of runs; the stranded sample walks the claim index with limits
(a skip scan for the distinct workflows); a schedule's runs use the partial index of migration
0013. SQL private to this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, NamedTuple

from ripple.platform.ops.ports import StrandedGauge
from ripple.workflows.runs.records import StepRecord
from ripple.workflows.store.rows import Executor

__all__ = [
    "RecentCount",
    "WaitRow",
    "count_runs_by_minute",
    "read_run_trace",
    "select_buffered_signals",
    "select_first_steps",
    "select_open_waits",
    "select_schedule_runs",
    "select_stranded_sample",
]

# $1 first minute of the window, $2 first minute of the recent part, $3 bucket width in
# seconds: run counts by workflow, status and recent bucket (NULL: before the recent part), from
# the rollup of migration 0017 plus the changes the sweeper has not folded into it yet.
_SELECT_RUN_COUNTS: Final = """
SELECT workflow, status,
       CASE WHEN minute >= $2
            THEN floor(extract(epoch FROM minute - $2) / $3)::int END AS bucket,
       sum(n)::bigint AS n
FROM (
    SELECT minute, workflow, status, n FROM ripple_run_counts WHERE minute >= $1
    UNION ALL
    SELECT minute, workflow, entered_status, n FROM ripple_run_count_changes
    WHERE minute >= $1 AND entered_status IS NOT NULL
    UNION ALL
    SELECT minute, workflow, left_status, -n FROM ripple_run_count_changes
    WHERE minute >= $1 AND left_status IS NOT NULL
) AS c
GROUP BY 1, 2, 3
HAVING sum(n) <> 0
"""

# $1 liveness window in seconds, $2 runs per workflow, $3 workflows. The bounded form of
# upkeep's _SELECT_STRANDED_RUNS for page views: the same liveness rule over the $2
# active runs due soonest of each of the first $3 workflows with active runs. The workflows come
# from a skip scan of the claim index (one probe each), the runs from a walk of it per workflow,
# so a view reads at most $2 * $3 runs however many are active.
_SELECT_STRANDED_SAMPLE: Final = """
WITH RECURSIVE live AS (
    SELECT DISTINCT s ->> 'workflow' AS workflow, (s ->> 'version')::int AS version
    FROM ripple_workers w
    CROSS JOIN LATERAL jsonb_array_elements(w.serves) AS s
    WHERE w.heartbeat_at > now() - make_interval(secs => $1)
),
workflows AS (
    (SELECT workflow FROM ripple_runs
     WHERE status IN ('pending', 'running', 'sleeping', 'waiting')
     ORDER BY workflow LIMIT 1)
    UNION ALL
    SELECT (SELECT r.workflow FROM ripple_runs r
            WHERE r.status IN ('pending', 'running', 'sleeping', 'waiting')
              AND r.workflow > w.workflow
            ORDER BY r.workflow LIMIT 1)
    FROM workflows w
    WHERE w.workflow IS NOT NULL
),
active AS (
    SELECT w.workflow, a.version
    FROM (SELECT workflow FROM workflows WHERE workflow IS NOT NULL LIMIT $3) AS w
    CROSS JOIN LATERAL (
        SELECT r.version FROM ripple_runs r
        WHERE r.workflow = w.workflow AND r.status IN ('pending', 'running', 'sleeping', 'waiting')
        ORDER BY r.available_at
        LIMIT $2
    ) AS a
)
SELECT a.workflow, a.version, count(*) AS runs
FROM active a
WHERE NOT EXISTS (
    SELECT 1 FROM live l
    WHERE l.workflow = a.workflow AND (a.version IS NULL OR l.version = a.version)
)
GROUP BY a.workflow, a.version
ORDER BY a.workflow, a.version
"""

# $1 run id, $2 limit: the first $2 journal entries of a run (the columns of the journal's
# _SELECT_STEPS), so a run with a huge journal still renders quickly.
_SELECT_RUN_STEPS: Final = """
SELECT key, seq, kind, status, attempts, output, error, due_at, started_at, completed_at
FROM ripple_steps WHERE run_id = $1 ORDER BY seq, started_at LIMIT $2
"""

# $1 run id
_SELECT_WAITS: Final = """
SELECT step_key, name, event, match, expires_at, created_at
FROM ripple_waits WHERE run_id = $1 ORDER BY created_at, step_key
"""

# $1 run id
_SELECT_RUN_TRACE: Final = "SELECT trace FROM ripple_runs WHERE run_id = $1"

# $1 run id, $2 limit: signals received and not consumed yet
_SELECT_SIGNALS: Final = """
SELECT name, payload, created_at FROM ripple_signals WHERE run_id = $1 ORDER BY id LIMIT $2
"""

# $1 workflow, $2 key prefix "schedule:{name}:", $3 limit: a schedule's newest runs (ticks and
# manual triggers carry "schedule:{name}:..." keys), through the partial index of runs started
# by schedules (migration 0013), newest first.
_SELECT_SCHEDULE_RUNS: Final = """
SELECT run_id, status, created_at FROM ripple_runs
WHERE workflow = $1 AND idempotency_key LIKE 'schedule:%' AND starts_with(idempotency_key, $2)
ORDER BY run_id DESC
LIMIT $3
"""


class RecentCount(NamedTuple):
    """Runs of one workflow and status, in one bucket of the recent part (None: before it)."""

    workflow: str
    status: str
    bucket: int | None
    n: int


@dataclass(frozen=True, slots=True)
class WaitRow:
    step_key: str
    name: str
    event: str | None
    match: Any
    expires_at: datetime | None
    created_at: datetime


async def count_runs_by_minute(
    conn: Executor, *, since: datetime, recent_since: datetime, bucket_seconds: float
) -> list[RecentCount]:
    """Exact counts of the runs created from the minute of `since` on, by workflow, status
    and bucket of `bucket_seconds` from the minute of `recent_since` (minutes are UTC)."""
    rows = await conn.fetch(
        _SELECT_RUN_COUNTS, _minute(since), _minute(recent_since), bucket_seconds
    )
    return [RecentCount(row[0], row[1], row[2], int(row[3])) for row in rows]


def _minute(when: datetime) -> datetime:
    return when.replace(second=0, microsecond=0)


async def select_stranded_sample(
    conn: Executor, *, live_seconds: float, per_workflow: int, workflows: int
) -> list[StrandedGauge]:
    """Stranded runs among the `per_workflow` active runs due soonest of each of the first
    `workflows` workflows (by name) with active runs."""
    rows = await conn.fetch(_SELECT_STRANDED_SAMPLE, live_seconds, per_workflow, workflows)
    return [StrandedGauge(row["workflow"], row["version"], int(row["runs"])) for row in rows]


async def select_first_steps(conn: Executor, *, run_id: str, limit: int) -> list[StepRecord]:
    """The run's first `limit` journal entries in call order."""
    return [StepRecord.from_row(row) for row in await conn.fetch(_SELECT_RUN_STEPS, run_id, limit)]


async def select_open_waits(conn: Executor, *, run_id: str) -> list[WaitRow]:
    return [WaitRow(**dict(row)) for row in await conn.fetch(_SELECT_WAITS, run_id)]


async def select_buffered_signals(
    conn: Executor, *, run_id: str, limit: int
) -> list[dict[str, Any]]:
    """Signals the run received and has not consumed yet (`name`, `payload`, `created_at`)."""
    return [dict(row) for row in await conn.fetch(_SELECT_SIGNALS, run_id, limit)]


async def read_run_trace(conn: Executor, *, run_id: str) -> Any:
    """The trace context the run was started under (None: none, or no such run)."""
    return await conn.fetchval(_SELECT_RUN_TRACE, run_id)


async def select_schedule_runs(
    conn: Executor, *, workflow: str, schedule: str, limit: int
) -> list[dict[str, Any]]:
    """The newest `limit` runs a workflow schedule started (`run_id`, `status`, `created_at`)."""
    rows = await conn.fetch(_SELECT_SCHEDULE_RUNS, workflow, f"schedule:{schedule}:", limit)
    return [dict(row) for row in rows]
