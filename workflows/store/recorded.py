"""Recorded runs for `verify` and `ripple runs export` (reads only), the operator's early wake
of a run's timers (`wake_run`), and the per-version overview of active runs and live workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ripple.workflows.journal import Entry
from ripple.workflows.store.rows import Executor

__all__ = [
    "RecordedRow",
    "VersionRow",
    "WorkerServing",
    "load_full_journals",
    "run_settled",
    "select_recorded_runs",
    "select_runs_by_id",
    "select_version_runs",
    "select_workers_serving",
    "wake_run",
]

# $1 workflow, $2 version, $3 window in seconds, $4 limit. Active runs first (all of them up
# to the limit), then completed and failed runs that ended within the window, newest first.
_SELECT_RECORDED: Final = """
(SELECT run_id, workflow, version, status, input, attempt, created_at, 0 AS rank,
        completed_at FROM ripple_runs
 WHERE workflow = $1 AND version = $2
   AND status IN ('pending', 'running', 'sleeping', 'waiting')
 ORDER BY run_id LIMIT $4)
UNION ALL
(SELECT run_id, workflow, version, status, input, attempt, created_at, 1 AS rank,
        completed_at FROM ripple_runs
 WHERE workflow = $1 AND version = $2 AND status IN ('completed', 'failed')
   AND completed_at > now() - make_interval(secs => $3)
 ORDER BY completed_at DESC LIMIT $4)
ORDER BY rank, completed_at DESC NULLS FIRST
LIMIT $4
"""

# $1 run ids
_SELECT_BY_ID: Final = """
SELECT run_id, workflow, version, status, input, attempt, created_at FROM ripple_runs
WHERE run_id = ANY($1::text[]) AND version IS NOT NULL
"""

# $1 workflow, $2 window in seconds, $3 limit: runs created within the window, newest first.
_SELECT_BY_WORKFLOW: Final = """
SELECT run_id, workflow, version, status, input, attempt, created_at FROM ripple_runs
WHERE workflow = $1 AND version IS NOT NULL AND created_at > now() - make_interval(secs => $2)
ORDER BY run_id DESC LIMIT $3
"""

_SELECT_FULL_JOURNALS: Final = """
SELECT run_id, key, seq, kind, status, attempts, output, error, due_at, started_at, completed_at
FROM ripple_steps WHERE run_id = ANY($1::text[])
ORDER BY run_id, seq
"""

# $1 run id, $2 step key or NULL (every one). In one statement: pending sleeps due later
# complete now, journaled as fired early (output {"firedEarly": true, "dueAt": ...}); pending
# waits with a timeout later expire now (the engine records the timeout when it resumes the
# run); the run, parked, becomes available now. Returns the keys fired.
_WAKE_RUN: Final = """
WITH run AS (
    SELECT run_id FROM ripple_runs
    WHERE run_id = $1 AND status IN ('sleeping', 'waiting')
    FOR UPDATE
),
slept AS (
    UPDATE ripple_steps s
    SET status = 'completed', completed_at = now(),
        output = jsonb_build_object('firedEarly', true, 'dueAt', s.due_at)
    FROM run
    WHERE s.run_id = run.run_id AND s.kind = 'sleep' AND s.status = 'pending'
      AND s.due_at > now() AND ($2::text IS NULL OR s.key = $2)
    RETURNING s.key
),
waited AS (
    UPDATE ripple_steps s SET due_at = now()
    FROM run
    WHERE s.run_id = run.run_id AND s.kind = 'wait' AND s.status = 'pending'
      AND s.due_at > now() AND ($2::text IS NULL OR s.key = $2)
    RETURNING s.key
),
expired AS (
    UPDATE ripple_waits w SET expires_at = now()
    FROM waited
    WHERE w.run_id = $1 AND w.step_key = waited.key
    RETURNING w.step_key
),
fired AS (
    SELECT key FROM slept UNION ALL SELECT key FROM waited
),
woken AS (
    UPDATE ripple_runs r SET available_at = now(), updated_at = now()
    FROM run
    WHERE r.run_id = run.run_id AND EXISTS (SELECT 1 FROM fired)
    RETURNING r.run_id
)
SELECT key FROM fired
"""

# $1 run id: its status, and whether it is due only later (a parked run that is not)
_SELECT_SETTLED: Final = """
SELECT status, available_at > now() AS later FROM ripple_runs WHERE run_id = $1
"""

# no parameters: active runs by (workflow, version, status), with the oldest's creation.
_SELECT_VERSION_RUNS: Final = """
SELECT workflow, version, status, count(*) AS runs, min(created_at) AS oldest
FROM ripple_runs
WHERE status IN ('pending', 'running', 'sleeping', 'waiting')
GROUP BY workflow, version, status
ORDER BY workflow, version NULLS FIRST, status
"""

# $1 liveness window in seconds: live workers by the (workflow, version) they serve.
_SELECT_WORKERS_SERVING: Final = """
SELECT s ->> 'workflow' AS workflow, (s ->> 'version')::int AS version,
       count(*) AS workers, array_agg(w.hostname || ':' || w.pid ORDER BY w.worker_id) AS names
FROM ripple_workers w
CROSS JOIN LATERAL jsonb_array_elements(w.serves) AS s
WHERE w.heartbeat_at > now() - make_interval(secs => $1)
GROUP BY 1, 2
ORDER BY 1, 2
"""


@dataclass(frozen=True, slots=True)
class RecordedRow:
    """A run's identity, status and input, as a replay needs them."""

    run_id: str
    workflow: str
    version: int
    status: str
    input: Any
    attempt: int
    created_at: datetime

    @classmethod
    def from_row(cls, row: Any) -> RecordedRow:
        return cls(
            run_id=row["run_id"],
            workflow=row["workflow"],
            version=row["version"],
            status=row["status"],
            input=row["input"],
            attempt=row["attempt"],
            created_at=row["created_at"],
        )


@dataclass(frozen=True, slots=True)
class VersionRow:
    workflow: str
    version: int | None
    status: str
    runs: int
    oldest: datetime


@dataclass(frozen=True, slots=True)
class WorkerServing:
    workflow: str
    version: int
    workers: int
    names: list[str]


async def select_recorded_runs(
    conn: Executor, *, workflow: str, version: int, since_seconds: float, limit: int
) -> list[RecordedRow]:
    """Active runs of (`workflow`, `version`), then its completed and failed runs that ended
    within `since_seconds`, at most `limit` in all."""
    rows = await conn.fetch(_SELECT_RECORDED, workflow, version, since_seconds, limit)
    return [RecordedRow.from_row(row) for row in rows]


async def select_runs_by_id(conn: Executor, *, run_ids: list[str]) -> list[RecordedRow]:
    """The runs (claimed at least once) among `run_ids`."""
    return [RecordedRow.from_row(row) for row in await conn.fetch(_SELECT_BY_ID, run_ids)]


async def select_runs_of_workflow(
    conn: Executor, *, workflow: str, since_seconds: float, limit: int
) -> list[RecordedRow]:
    """Runs of `workflow` created within `since_seconds`, newest first."""
    rows = await conn.fetch(_SELECT_BY_WORKFLOW, workflow, since_seconds, limit)
    return [RecordedRow.from_row(row) for row in rows]


async def load_full_journals(conn: Executor, *, run_ids: list[str]) -> dict[str, list[Entry]]:
    """The journals of `run_ids` with their timestamps, in call order."""
    out: dict[str, list[Entry]] = {run_id: [] for run_id in run_ids}
    if run_ids:
        for row in await conn.fetch(_SELECT_FULL_JOURNALS, run_ids):
            out[row["run_id"]].append(
                Entry(
                    key=row["key"],
                    seq=row["seq"],
                    kind=row["kind"],
                    status=row["status"],
                    attempts=row["attempts"],
                    output=row["output"],
                    error=row["error"],
                    due_at=row["due_at"],
                    started_at=row["started_at"],
                    completed_at=row["completed_at"],
                )
            )
    return out


async def wake_run(conn: Executor, *, run_id: str, step: str | None) -> list[str]:
    """Fire the parked run's future sleeps and wait timeouts now (only `step` when given);
    the keys fired. Call inside a transaction."""
    return [row["key"] for row in await conn.fetch(_WAKE_RUN, run_id, step)]


async def run_settled(conn: Executor, *, run_id: str) -> bool | None:
    """Whether the run is at rest: ended, or parked until a later time or an outside event
    (not running, not due now); None when there is no such run."""
    row = await conn.fetchrow(_SELECT_SETTLED, run_id)
    if row is None:
        return None
    return row["status"] in ("completed", "failed", "canceled") or (
        row["status"] != "running" and bool(row["later"])
    )


async def select_version_runs(conn: Executor) -> list[VersionRow]:
    """Active runs by workflow, version and status."""
    return [
        VersionRow(r["workflow"], r["version"], r["status"], r["runs"], r["oldest"])
        for r in await conn.fetch(_SELECT_VERSION_RUNS)
    ]


async def select_workers_serving(conn: Executor, *, live_seconds: float) -> list[WorkerServing]:
    """Live workers by the (workflow, version) they serve."""
    return [
        WorkerServing(r["workflow"], r["version"], r["workers"], list(r["names"]))
        for r in await conn.fetch(_SELECT_WORKERS_SERVING, live_seconds)
    ]
