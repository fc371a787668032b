"""The journal and the fenced writes of a claimed run: flushes (one run, or the group commit
of many), finishing, suspending, retrying, releasing, lease renewal, and a child's result in
its parent's journal. Every write a worker makes names the fencing epoch it claimed with. SQL
private to this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, NamedTuple

from ripple.workflows.runs.records import StepRecord
from ripple.workflows.store.rows import Executor

__all__ = [
    "FinishedRun",
    "JournalRow",
    "RunTimes",
    "clear_suspect",
    "commit_runs",
    "complete_parent_step",
    "delete_unfinished_steps",
    "extend_leases",
    "finish_run",
    "flush_run",
    "list_steps",
    "load_journals",
    "read_step",
    "release_run",
    "retry_run",
    "suspend_run",
    "time_out_step",
    "upsert_steps",
]

# $1 run_id
_SELECT_STEPS: Final = """
SELECT key, seq, kind, status, attempts, output, error, due_at, started_at, completed_at
FROM ripple_steps WHERE run_id = $1 ORDER BY seq, started_at
"""

# $1 run ids text[]: the journals of several claimed runs at once.
_SELECT_JOURNALS: Final = """
SELECT run_id, key, seq, kind, status, attempts, output, error, due_at
FROM ripple_steps WHERE run_id = ANY($1::text[])
"""

# Upsert journal entries; a completed or failed entry is never changed again.
# $1 run_id, $2 jsonb array of {key, seq, kind, status, attempts, output, error, due_at,
# started_at, completed_at}
_UPSERT_STEPS: Final = """
INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, output, error, due_at,
                          started_at, completed_at)
SELECT $1, s.key, s.seq, s.kind, s.status, s.attempts, s.output, s.error, s.due_at,
       coalesce(s.started_at, now()),
       coalesce(s.completed_at, CASE WHEN s.status IN ('completed', 'failed') THEN now() END)
FROM jsonb_to_recordset($2::jsonb) AS s(key text, seq int, kind text, status text,
     attempts int, output jsonb, error jsonb, due_at timestamptz, started_at timestamptz,
     completed_at timestamptz)
ON CONFLICT (run_id, key) DO UPDATE
SET status = excluded.status, attempts = excluded.attempts, output = excluded.output,
    error = excluded.error, due_at = excluded.due_at, completed_at = excluded.completed_at
WHERE ripple_steps.status NOT IN ('completed', 'failed')
"""

# The journal upsert as the tail of a single-statement write: `run` is a CTE that returns the
# run's row only if this worker still owns it, so nothing is journaled by a fenced-out worker.
# $5 jsonb array of journal entries (see _UPSERT_STEPS)
_STEPS_AFTER_RUN: Final = """
, steps AS (
    INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, output, error, due_at,
                              started_at, completed_at)
    SELECT run.run_id, s.key, s.seq, s.kind, s.status, s.attempts, s.output, s.error, s.due_at,
           coalesce(s.started_at, now()),
           coalesce(s.completed_at, CASE WHEN s.status IN ('completed', 'failed') THEN now() END)
    FROM run, jsonb_to_recordset($5::jsonb) AS s(key text, seq int, kind text, status text,
         attempts int, output jsonb, error jsonb, due_at timestamptz, started_at timestamptz,
         completed_at timestamptz)
    ON CONFLICT (run_id, key) DO UPDATE
    SET status = excluded.status, attempts = excluded.attempts, output = excluded.output,
        error = excluded.error, due_at = excluded.due_at, completed_at = excluded.completed_at
    WHERE ripple_steps.status NOT IN ('completed', 'failed')
)
"""

# One round trip: fence (the UPDATE locks the run row to commit), extend the lease and journal.
# Returns no row when fenced out. Also the first statement of every multi-statement write.
# $1 run_id, $2 epoch, $3 lease seconds, $4 step_count, $5 entries
_FLUSH_HEAD: Final = """
WITH run AS (
    UPDATE ripple_runs SET available_at = now() + $3 * interval '1 second', step_count = $4
    WHERE run_id = $1 AND epoch = $2 AND status = 'running'
    RETURNING run_id
)"""

_FLUSH_RUN: Final = _FLUSH_HEAD + _STEPS_AFTER_RUN + "SELECT run_id FROM run"  # noqa: S608

# Group commit: the step flushes and simple completions of many runs in one statement. Each
# run is fenced by its own epoch: a run this worker no longer owns is left out (its entries are
# not journaled) without failing the others; the statement returns the runs it wrote. Rows are
# locked in run_id order (as `lock_event_wait_runs` does), so two writers never deadlock. A run
# listed in $7 also finishes (as _FINISH_RUN does; runs with a parent or open waits finish
# apart, in their own transaction). The others stay running: their row is only locked (the
# fence), not rewritten, unless $8 asks to renew the lease (and store the step count) — a
# row version per step would cost a new entry in every index of ripple_runs; the heartbeat
# renews leases, and a run that missed heartbeats renews its own (see `RunExecution`).
# $1 run ids text[], $2 epochs bigint[], $3 step counts int[], $4 lease seconds,
# $5 jsonb array of journal entries, each with its run_id (see _UPSERT_STEPS),
# $6 jsonb array of {run_id, prefix}: journal entries to delete (trimmed loop iterations), in
# the same statement that records the later iteration,
# $7 jsonb array of {run_id, status, output, error}: the runs that finish,
# $8 renew bool[]: per run, extend its lease and store its step count.
_COMMIT_RUNS: Final = """
WITH req AS (
    SELECT * FROM unnest($1::text[], $2::bigint[], $3::int[], $8::bool[])
        AS q(run_id, epoch, step_count, renew)
), owned AS (
    SELECT r.run_id, q.step_count, q.renew FROM ripple_runs r JOIN req q USING (run_id)
    WHERE r.epoch = q.epoch AND r.status = 'running'
    ORDER BY r.run_id
    FOR UPDATE OF r
), fin AS (
    SELECT * FROM jsonb_to_recordset($7::jsonb)
        AS f(run_id text, status text, output jsonb, error jsonb)
), run AS (
    UPDATE ripple_runs r
    SET step_count = o.step_count,
        available_at = CASE WHEN f.run_id IS NULL THEN now() + $4 * interval '1 second'
                            ELSE now() END,
        status = coalesce(f.status, r.status),
        output = CASE WHEN f.run_id IS NULL THEN r.output ELSE f.output END,
        error = CASE WHEN f.run_id IS NULL THEN r.error ELSE f.error END,
        completed_at = CASE WHEN f.run_id IS NULL THEN r.completed_at ELSE now() END,
        lease_owner = CASE WHEN f.run_id IS NULL THEN r.lease_owner END,
        updated_at = CASE WHEN f.run_id IS NULL THEN r.updated_at ELSE now() END
    FROM owned o LEFT JOIN fin f USING (run_id)
    WHERE r.run_id = o.run_id AND (o.renew OR f.run_id IS NOT NULL)
    RETURNING r.run_id, r.created_at, r.completed_at
), steps AS (
    INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, output, error, due_at,
                              started_at, completed_at)
    SELECT s.run_id, s.key, s.seq, s.kind, s.status, s.attempts, s.output, s.error, s.due_at,
           coalesce(s.started_at, now()),
           coalesce(s.completed_at, CASE WHEN s.status IN ('completed', 'failed') THEN now() END)
    FROM jsonb_to_recordset($5::jsonb) AS s(run_id text, key text, seq int, kind text,
         status text, attempts int, output jsonb, error jsonb, due_at timestamptz,
         started_at timestamptz, completed_at timestamptz)
    WHERE s.run_id IN (SELECT run_id FROM owned)
    ON CONFLICT (run_id, key) DO UPDATE
    SET status = excluded.status, attempts = excluded.attempts, output = excluded.output,
        error = excluded.error, due_at = excluded.due_at, completed_at = excluded.completed_at
    WHERE ripple_steps.status NOT IN ('completed', 'failed')
), trimmed AS (
    DELETE FROM ripple_steps s
    USING jsonb_to_recordset($6::jsonb) AS t(run_id text, prefix text)
    WHERE s.run_id = t.run_id AND t.run_id IN (SELECT run_id FROM owned)
      AND left(s.key, length(t.prefix)) = t.prefix
)
SELECT o.run_id, run.created_at, run.completed_at FROM owned o LEFT JOIN run USING (run_id)
"""

# One round trip: fence, journal and finish a run (with its row locked to commit). Returns no
# row when fenced out. A run with open waits or a parent follows it with `delete_run_waits` and
# `lock_run` + `complete_parent_step` in the same transaction.
# $1 run_id, $2 epoch, $3 status, $4 output, $5 entries, $6 error, $7 step_count
_FINISH_HEAD: Final = """
WITH run AS (
    UPDATE ripple_runs
    SET status = $3, output = $4, error = $6, step_count = $7, completed_at = now(),
        lease_owner = NULL, available_at = now(), updated_at = now()
    WHERE run_id = $1 AND epoch = $2 AND status = 'running'
    RETURNING run_id, created_at, completed_at, parent_run_id, parent_step_key, parent_step_seq
)"""

_FINISH_TAIL: Final = (
    "SELECT created_at, completed_at, parent_run_id, parent_step_key, parent_step_seq FROM run"
)

_FINISH_RUN: Final = _FINISH_HEAD + _STEPS_AFTER_RUN + _FINISH_TAIL

# Suspend: runs after the fence (_FLUSH_RUN) locked the run, so it sees every resolution
# committed before the lock.
# $1 run_id, $2 epoch, $3 status, $4 wake time (infinity: none), $5 step_count,
# $6 keys of waits/children the run is blocked on (any already resolved: available now)
_SUSPEND_RUN: Final = """
UPDATE ripple_runs
SET status = $3,
    available_at = CASE WHEN EXISTS (
        SELECT 1 FROM ripple_steps s
        WHERE s.run_id = $1 AND s.key = ANY($6::text[]) AND s.status IN ('completed', 'failed')
    ) THEN now() ELSE $4 END,
    lease_owner = NULL, step_count = $5, suspect = false, updated_at = now()
WHERE run_id = $1 AND epoch = $2
RETURNING available_at
"""

# Workflow-level retry. $1 run_id, $2 epoch, $3 delay seconds, $4 error, $5 step_count
_RETRY_RUN: Final = """
UPDATE ripple_runs
SET status = 'pending', attempt = attempt + 1, error = $4, step_count = $5,
    available_at = now() + $3 * interval '1 second', lease_owner = NULL, suspect = false,
    updated_at = now()
WHERE run_id = $1 AND epoch = $2
"""

# $1 run_id: a new attempt re-executes every step that has no recorded result.
_DELETE_UNFINISHED_STEPS: Final = """
DELETE FROM ripple_steps WHERE run_id = $1 AND status <> 'completed'
"""

# A suspect (claimed in isolation) recorded a step: it survived its own work, so a worker
# lost from now on is not charged to it, and its worker may claim other runs beside it.
# Returns no row when fenced out. $1 run_id, $2 epoch
_CLEAR_SUSPECT: Final = """
UPDATE ripple_runs SET suspect = false
WHERE run_id = $1 AND epoch = $2 AND status = 'running'
RETURNING run_id
"""

# Release a claimed run now (stopping worker). $1 run_id, $2 epoch
_RELEASE_RUN: Final = """
UPDATE ripple_runs SET status = 'pending', available_at = now(), lease_owner = NULL
WHERE run_id = $1 AND epoch = $2 AND status = 'running'
"""

# Heartbeat. Rows are locked in run_id order, as the group commit (_COMMIT_RUNS) locks them:
# a heartbeat and a commit batch of the same worker never deadlock.
# $1 run ids text[], $2 epochs bigint[], $3 lease seconds
_EXTEND_LEASES: Final = """
WITH owned AS (
    SELECT r.run_id FROM ripple_runs r
    JOIN unnest($1::text[], $2::bigint[]) AS h(run_id, epoch) USING (run_id)
    WHERE r.epoch = h.epoch AND r.status = 'running'
    ORDER BY r.run_id
    FOR UPDATE OF r
)
UPDATE ripple_runs r SET available_at = now() + $3 * interval '1 second'
FROM owned o WHERE r.run_id = o.run_id
RETURNING r.run_id
"""

# A child run ended: record it as its parent's step result and make the parent available (run
# after `lock_run` on the parent, so a parent suspending at this moment sees the result).
# $1 parent run_id, $2 entry jsonb {key, seq, kind, status, attempts, output, error}
_COMPLETE_PARENT_STEP: Final = """
WITH journaled AS (
    INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, output, error,
                              started_at, completed_at)
    SELECT $1, s.key, s.seq, s.kind, s.status, s.attempts, s.output, s.error, now(), now()
    FROM jsonb_to_record($2::jsonb) AS s(key text, seq int, kind text, status text,
         attempts int, output jsonb, error jsonb)
    ON CONFLICT (run_id, key) DO UPDATE
    SET status = excluded.status, attempts = excluded.attempts, output = excluded.output,
        error = excluded.error, due_at = excluded.due_at, completed_at = excluded.completed_at
    WHERE ripple_steps.status NOT IN ('completed', 'failed')
)
UPDATE ripple_runs SET available_at = now()
WHERE run_id = $1 AND status IN ('waiting', 'sleeping')
"""

# $1 run_id, $2 key
_SELECT_STEP: Final = """
SELECT key, seq, kind, status, attempts, output, error, due_at
FROM ripple_steps WHERE run_id = $1 AND key = $2
"""

# Fail a pending child/wait step on timeout unless it was resolved first.
# $1 run_id, $2 key, $3 error
_TIME_OUT_STEP: Final = """
UPDATE ripple_steps SET status = 'failed', error = $3, completed_at = now()
WHERE run_id = $1 AND key = $2 AND status NOT IN ('completed', 'failed')
RETURNING 1
"""


@dataclass(frozen=True, slots=True)
class JournalRow:
    """A journal entry as the engine replays it."""

    key: str
    seq: int
    kind: str
    status: str
    attempts: int
    output: Any
    error: dict[str, Any] | None
    due_at: datetime | None

    @classmethod
    def from_row(cls, row: Any) -> JournalRow:
        return cls(
            key=row["key"],
            seq=row["seq"],
            kind=row["kind"],
            status=row["status"],
            attempts=row["attempts"],
            output=row["output"],
            error=row["error"],
            due_at=row["due_at"],
        )


class RunTimes(NamedTuple):
    """A run the group commit wrote; the times are set only for a run it finished."""

    created_at: datetime | None
    completed_at: datetime | None


class FinishedRun(NamedTuple):
    created_at: datetime
    completed_at: datetime
    parent_run_id: str | None
    parent_step_key: str | None
    parent_step_seq: int | None


async def list_steps(conn: Executor, *, run_id: str) -> list[StepRecord]:
    """A run's journal in call order."""
    return [StepRecord.from_row(row) for row in await conn.fetch(_SELECT_STEPS, run_id)]


async def load_journals(conn: Executor, *, run_ids: list[str]) -> dict[str, list[JournalRow]]:
    """Journals of several runs, by run id."""
    out: dict[str, list[JournalRow]] = {run_id: [] for run_id in run_ids}
    if run_ids:
        for row in await conn.fetch(_SELECT_JOURNALS, run_ids):
            out[row["run_id"]].append(JournalRow.from_row(row))
    return out


async def read_step(conn: Executor, *, run_id: str, key: str) -> JournalRow | None:
    row = await conn.fetchrow(_SELECT_STEP, run_id, key)
    return None if row is None else JournalRow.from_row(row)


async def upsert_steps(conn: Executor, *, run_id: str, entries: list[dict[str, Any]]) -> None:
    """Journal entries (`Entry.to_json()`); a completed or failed entry never changes again."""
    await conn.execute(_UPSERT_STEPS, run_id, entries)


async def flush_run(
    conn: Executor,
    *,
    run_id: str,
    epoch: int,
    lease: float,
    step_count: int,
    entries: list[dict[str, Any]],
) -> bool:
    """Fence (lock the run to commit if this epoch still owns it), extend the lease and
    journal `entries`, in one round trip; False when fenced out."""
    owned = await conn.fetchval(_FLUSH_RUN, run_id, epoch, lease, step_count, entries)
    return owned is not None


async def commit_runs(
    conn: Executor,
    *,
    run_ids: list[str],
    epochs: list[int],
    step_counts: list[int],
    lease: float,
    entries: list[dict[str, Any]],
    trims: list[dict[str, str]],
    finals: list[dict[str, Any]],
    renew: list[bool],
) -> dict[str, RunTimes]:
    """The group commit: many runs' flushes and simple completions in one statement (arrays
    parallel to `run_ids`, which must be sorted: the lock order). Returns the runs still owned
    (the others were fenced out and wrote nothing)."""
    rows = await conn.fetch(
        _COMMIT_RUNS, run_ids, epochs, step_counts, lease, entries, trims, finals, renew
    )
    return {row[0]: RunTimes(row[1], row[2]) for row in rows}


async def finish_run(
    conn: Executor,
    *,
    run_id: str,
    epoch: int,
    status: str,
    output: Any,
    error: dict[str, Any] | None,
    entries: list[dict[str, Any]],
    step_count: int,
) -> FinishedRun | None:
    """Fence, journal and finish a run in one round trip; None when fenced out."""
    row = await conn.fetchrow(
        _FINISH_RUN, run_id, epoch, status, output, entries, error, step_count
    )
    return None if row is None else FinishedRun(row[0], row[1], row[2], row[3], row[4])


async def suspend_run(
    conn: Executor,
    *,
    run_id: str,
    epoch: int,
    status: str,
    wake_at: datetime,
    step_count: int,
    blocking_keys: list[str],
) -> datetime:
    """Suspend a fenced run until `wake_at` (now if a blocking key already resolved); when it
    becomes available."""
    available: datetime = await conn.fetchval(
        _SUSPEND_RUN, run_id, epoch, status, wake_at, step_count, blocking_keys
    )
    return available


async def retry_run(
    conn: Executor,
    *,
    run_id: str,
    epoch: int,
    delay: float,
    error: dict[str, Any],
    step_count: int,
) -> None:
    """Workflow-level retry: pending again after `delay` seconds, attempt + 1."""
    await conn.execute(_RETRY_RUN, run_id, epoch, delay, error, step_count)


async def delete_unfinished_steps(conn: Executor, *, run_id: str) -> None:
    """A new attempt re-executes every step that has no recorded result."""
    await conn.execute(_DELETE_UNFINISHED_STEPS, run_id)


async def clear_suspect(conn: Executor, *, run_id: str, epoch: int) -> bool:
    """The suspect recorded a step (see `_CLEAR_SUSPECT`); False when fenced out."""
    return await conn.fetchval(_CLEAR_SUSPECT, run_id, epoch) is not None


async def release_run(conn: Executor, *, run_id: str, epoch: int) -> None:
    """Hand a claimed run back (a stopping worker): pending, available now."""
    await conn.execute(_RELEASE_RUN, run_id, epoch)


async def extend_leases(
    conn: Executor, *, run_ids: list[str], epochs: list[int], lease: float
) -> set[str]:
    """Heartbeat: extend the leases of runs still owned; the ones extended."""
    return {row[0] for row in await conn.fetch(_EXTEND_LEASES, run_ids, epochs, lease)}


async def complete_parent_step(
    conn: Executor, *, parent_run_id: str, entry: dict[str, Any]
) -> None:
    """Record a child's end as its parent's step `entry` and make the parent available (after
    `lock_run` on the parent)."""
    await conn.execute(_COMPLETE_PARENT_STEP, parent_run_id, entry)


async def time_out_step(conn: Executor, *, run_id: str, key: str, error: dict[str, Any]) -> bool:
    """Fail a pending child/wait step on timeout; False if it was resolved first."""
    return bool(await conn.fetchval(_TIME_OUT_STEP, run_id, key, error))
