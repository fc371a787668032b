"""Operating runs: retry, fork, the selections of bulk cancel/retry (the cancel itself is
`runs.cancel_trees`). SQL private to this module; the caller holds the transaction and the row
locks these statements rely on.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple

from ripple.workflows.store.rows import Executor

__all__ = [
    "OperationTarget",
    "RunRef",
    "copy_journal",
    "count_run_filter",
    "find_step_seq",
    "insert_fork",
    "lock_run_for_operation",
    "retry_runs",
    "select_run_batch",
    "select_step_keys",
]

# $1 run_id: lock a run and read what retry/fork check.
_LOCK_RUN_FOR_OPERATION: Final = """
SELECT run_id, workflow, status, input FROM ripple_runs WHERE run_id = $1 FOR UPDATE
"""

# A batch of runs matching a bulk filter, locked, in run id order after a cursor. A row a
# worker changes meanwhile is re-checked against the filter once its lock is released (READ
# COMMITTED re-evaluation), so a run that no longer matches is not returned.
# $1 workflow|NULL, $2 statuses text[], $3 created at or after|NULL, $4 created before,
# $5 cursor (last run_id seen, '' at first), $6 limit
_SELECT_RUN_BATCH: Final = """
SELECT run_id FROM ripple_runs
WHERE ($1::text IS NULL OR workflow = $1)
  AND status = ANY($2::text[])
  AND ($3::timestamptz IS NULL OR created_at >= $3)
  AND created_at < $4
  AND run_id > $5
ORDER BY run_id
LIMIT $6
FOR UPDATE
"""

# How many runs a bulk action would act on now (its dry run; same filter as _SELECT_RUN_BATCH).
# $1 workflow|NULL, $2 statuses text[], $3 created at or after|NULL, $4 created before
_COUNT_RUN_FILTER: Final = """
SELECT count(*) FROM ripple_runs
WHERE ($1::text IS NULL OR workflow = $1)
  AND status = ANY($2::text[])
  AND ($3::timestamptz IS NULL OR created_at >= $3)
  AND created_at < $4
"""

# Make failed/canceled runs claimable again under the same id (their rows locked by the
# caller). The journal is cut at the first entry that must run again: one without a recorded
# result (the failed step, steps interrupted by a cancel), a compensation, or a step that a
# compensation undid (its recorded result is no longer true). Everything recorded before the
# cut keeps its result and is not run again; everything from it on (by journal position, the
# order the replay checks) runs again, the failed step with a fresh attempt budget.
# Compensations that ran are not undone. The workflow attempt is bumped (children started
# again get new idempotency keys), the crash counter reset. $1 run ids text[]
_RETRY_RUNS: Final = """
WITH runs AS (
    SELECT run_id FROM ripple_runs
    WHERE run_id = ANY($1::text[]) AND status IN ('failed', 'canceled')
), cut AS (
    SELECT s.run_id, min(s.seq) AS seq
    FROM ripple_steps s JOIN runs ON runs.run_id = s.run_id
    WHERE s.status <> 'completed' OR s.kind = 'compensate'
       OR EXISTS (SELECT 1 FROM ripple_steps c
                  WHERE c.run_id = s.run_id AND c.kind = 'compensate'
                    AND c.key = 'compensate:' || s.key)
    GROUP BY s.run_id
), dropped AS (
    DELETE FROM ripple_steps s USING cut WHERE s.run_id = cut.run_id AND s.seq >= cut.seq
)
UPDATE ripple_runs r
SET status = 'pending', output = NULL, error = NULL, completed_at = NULL,
    available_at = now(), lease_owner = NULL, attempt = r.attempt + 1, recoveries = 0,
    suspect = false, step_count = 0, epoch = r.epoch + 1, updated_at = now()
FROM runs
WHERE r.run_id = runs.run_id
RETURNING r.run_id, r.workflow
"""

# $1 run_id, $2 key: the journal position of a step.
_SELECT_STEP_SEQ: Final = "SELECT seq FROM ripple_steps WHERE run_id = $1 AND key = $2"

# $1 run_id: the step keys of a run in journal order (for error messages).
_SELECT_STEP_KEYS: Final = """
SELECT key FROM ripple_steps WHERE run_id = $1 AND seq >= 0 ORDER BY seq LIMIT 50
"""

# A fork: a new pending run of the same workflow on the newest version served (version NULL),
# recording its origin. started_at is set: a run never started is claimed without reading its
# journal (ClaimedRun.fresh), and a fork has one. $1 new run_id, $2 source run_id, $3 input
_INSERT_FORK: Final = """
INSERT INTO ripple_runs (run_id, workflow, version, input, retention_seconds, forked_from,
                         started_at)
SELECT $1, workflow, NULL, $3, retention_seconds, run_id, now()
FROM ripple_runs WHERE run_id = $2
RETURNING workflow
"""

# The fork's journal: the source's finished entries before position $3.
# $1 new run_id, $2 source run_id, $3 seq of from_step
_COPY_JOURNAL: Final = """
INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, output, error,
                          started_at, completed_at)
SELECT $1, key, seq, kind, status, attempts, output, error, started_at, completed_at
FROM ripple_steps
WHERE run_id = $2 AND seq >= 0 AND seq < $3 AND status IN ('completed', 'failed')
"""


class OperationTarget(NamedTuple):
    """A run locked for retry or fork, with what they check."""

    run_id: str
    workflow: str
    status: str
    input: Any


class RunRef(NamedTuple):
    run_id: str
    workflow: str


async def lock_run_for_operation(conn: Executor, *, run_id: str) -> OperationTarget | None:
    row = await conn.fetchrow(_LOCK_RUN_FOR_OPERATION, run_id)
    return None if row is None else OperationTarget(row[0], row[1], row[2], row[3])


async def select_run_batch(
    conn: Executor,
    *,
    workflow: str | None,
    statuses: Sequence[str],
    since: datetime | None,
    before: datetime,
    cursor: str,
    limit: int,
) -> list[str]:
    """Lock and return the next page (by run id, after `cursor`) of runs matching a filter."""
    rows = await conn.fetch(
        _SELECT_RUN_BATCH, workflow, list(statuses), since, before, cursor, limit
    )
    return [row[0] for row in rows]


async def count_run_filter(
    conn: Executor,
    *,
    workflow: str | None,
    statuses: Sequence[str],
    since: datetime | None,
    before: datetime,
) -> int:
    """How many runs match a bulk filter now (its dry run)."""
    count: int = await conn.fetchval(_COUNT_RUN_FILTER, workflow, list(statuses), since, before)
    return count


async def retry_runs(conn: Executor, *, run_ids: Sequence[str]) -> list[RunRef]:
    """Make failed/canceled runs (locked by the caller) claimable again; the runs retried."""
    return [RunRef(row[0], row[1]) for row in await conn.fetch(_RETRY_RUNS, list(run_ids))]


async def find_step_seq(conn: Executor, *, run_id: str, key: str) -> int | None:
    """The journal position of a step, or None."""
    seq: int | None = await conn.fetchval(_SELECT_STEP_SEQ, run_id, key)
    return seq


async def select_step_keys(conn: Executor, *, run_id: str) -> list[str]:
    """The first step keys of a run in journal order (for error messages)."""
    return [row[0] for row in await conn.fetch(_SELECT_STEP_KEYS, run_id)]


async def insert_fork(conn: Executor, *, run_id: str, source_run_id: str, input: Any) -> str:
    """Create the fork `run_id` of `source_run_id` (which exists); the workflow's name."""
    workflow: str = await conn.fetchval(_INSERT_FORK, run_id, source_run_id, input)
    return workflow


async def copy_journal(conn: Executor, *, run_id: str, source_run_id: str, before_seq: int) -> None:
    """Copy the source's finished journal entries before position `before_seq` to the fork."""
    await conn.execute(_COPY_JOURNAL, run_id, source_run_id, before_seq)
