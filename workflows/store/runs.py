"""Runs: creating them (starts, children, a publish's fan-out, debounce), reading and listing
them, locking one, and canceling run trees. SQL private to this module; every function takes a
connection (or the pool) so callers compose one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, NamedTuple

from ripple.workflows.runs.records import Run
from ripple.workflows.store.rows import CanceledRun, Executor, command_count

__all__ = [
    "ChildRun",
    "Debounced",
    "RunOutcome",
    "cancel_trees",
    "debounce_run",
    "debounce_runs",
    "find_child_by_key",
    "find_run_by_key",
    "insert_child_run",
    "insert_run",
    "insert_runs",
    "list_runs",
    "lock_run",
    "read_run",
    "read_run_outcome",
    "select_canceled",
    "select_children_under",
    "start_runs",
]

RUN_COLUMNS: Final = (
    "run_id, workflow, version, status, input, output, error, attempt, created_at, started_at, "
    "completed_at, parent_run_id, deadline, idempotency_key, priority, blocked_by, forked_from"
)

# Every statement creating runs reads the workflow's ripple_flow_controls row (if any) and
# stores the run's concurrency, throttle and fairness keys (read from the input by their paths;
# "" when the path is missing or there is none; a start may name its fairness key) and limits
# with it.
_FLOW_COLUMNS: Final = (
    "priority, concurrency_key, concurrency_limit, throttle_key, throttle_limit, throttle_period, "
    "fairness_key"
)

_FLOW_VALUES: Final = """
       CASE WHEN f.concurrency_limit IS NOT NULL
            THEN coalesce({input} #>> f.concurrency_key, '') END,
       f.concurrency_limit,
       CASE WHEN f.throttle_limit IS NOT NULL THEN coalesce({input} #>> f.throttle_key, '') END,
       f.throttle_limit, f.throttle_period,
       CASE WHEN f.fairness THEN coalesce({fair}, {input} #>> f.fairness_key_path, '') END"""

# $1 run_id, $2 workflow, $3 version, $4 input, $5 idempotency_key, $6 deadline,
# $7 retention_seconds, $8 trace, $9 parent_run_id, $10 parent_step_key, $11 parent_step_seq,
# $12 priority (children: 0), $13 fairness key (NULL: read from the input)
_INSERT_RUN: Final = f"""
INSERT INTO ripple_runs (run_id, workflow, version, input, idempotency_key, deadline,
                         retention_seconds, trace, parent_run_id, parent_step_key, parent_step_seq,
                         {_FLOW_COLUMNS})
SELECT $1, $2, $3, $4::jsonb, $5, $6, $7, $8::jsonb, $9, $10, $11, $12::int,
       {_FLOW_VALUES.format(input="$4::jsonb", fair="$13::text")}
FROM (VALUES (1)) AS one (x) LEFT JOIN ripple_flow_controls f ON f.workflow = $2
ON CONFLICT (workflow, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING run_id
"""  # noqa: S608

# Group commit of concurrent starts (`WorkflowClient.start` without a caller's transaction):
# the runs of many starts in one statement; returns the ids of the runs it created (a start
# whose idempotency key exists already creates none: the caller looks the key up).
# $1 jsonb array of {run_id, workflow, version, input, idempotency_key, deadline,
# retention_seconds, trace, priority, fairness_key}
_START_RUNS: Final = f"""
INSERT INTO ripple_runs (run_id, workflow, version, input, idempotency_key, deadline,
                         retention_seconds, trace, {_FLOW_COLUMNS})
SELECT r.run_id, r.workflow, r.version, r.input, r.idempotency_key, r.deadline,
       r.retention_seconds, r.trace, r.priority,
       {_FLOW_VALUES.format(input="r.input", fair="r.fairness_key")}
FROM jsonb_to_recordset($1::jsonb)
     AS r(run_id text, workflow text, version int, input jsonb, idempotency_key text,
          deadline timestamptz, retention_seconds double precision, trace jsonb, priority int,
          fairness_key text)
LEFT JOIN ripple_flow_controls f ON f.workflow = r.workflow
-- in key order: two batches that share idempotency keys wait for each other in one order,
-- never in a cycle (a deadlock)
ORDER BY r.workflow, r.idempotency_key
ON CONFLICT (workflow, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING run_id
"""  # noqa: S608

# Debounce (the workflow's definition is known to the starting process): the key's pending,
# never-claimed run (ripple_runs_debounce) takes this start's input and is pushed back to
# `period` from now, at most to `max_wait` after its first start; else a new run due after
# `period` is created. Returns the run's id either way (and whether it is new).
# $1 run_id, $2 workflow, $3 version, $4 input, $5 idempotency_key, $6 deadline,
# $7 retention_seconds, $8 trace, $9 priority, $10 period seconds, $11 max wait seconds|NULL,
# $12 debounce key path text[] (NULL: one shared key), $13 fairness key (NULL: from the input)
_DEBOUNCE_RUN: Final = f"""
INSERT INTO ripple_runs AS r (run_id, workflow, version, input, idempotency_key, deadline,
                              retention_seconds, trace, debounce_key, available_at,
                              blocked_by, {_FLOW_COLUMNS})
SELECT $1, $2, $3, $4::jsonb, $5, $6, $7, $8::jsonb,
       coalesce($4::jsonb #>> $12::text[], ''), now() + $10 * interval '1 second', 'debounce',
       $9::int, {_FLOW_VALUES.format(input="$4::jsonb", fair="$13::text")}
FROM (VALUES (1)) AS one (x) LEFT JOIN ripple_flow_controls f ON f.workflow = $2
ON CONFLICT (workflow, debounce_key)
    WHERE status = 'pending' AND started_at IS NULL AND debounce_key IS NOT NULL
DO UPDATE SET
    input = excluded.input,
    available_at = CASE WHEN $11::float8 IS NULL THEN excluded.available_at
                        ELSE least(excluded.available_at, r.created_at + $11 * interval '1 second')
                   END,
    blocked_by = 'debounce',
    priority = greatest(r.priority, excluded.priority),
    concurrency_key = excluded.concurrency_key, throttle_key = excluded.throttle_key,
    fairness_key = excluded.fairness_key, updated_at = now()
RETURNING r.run_id, r.xmax = 0 AS created
"""  # noqa: S608

# The same for a publish's workflow runs: $1 jsonb array of {run_id, workflow, input,
# idempotency_key, trace, retention_seconds, period, path}, in publish order (max wait: the
# workflow's ripple_flow_controls row); per key
# the last one wins. Runs whose idempotency key exists already (a re-delivered event) are
# skipped. Returns one row per run created or updated.
_DEBOUNCE_RUNS_BATCH: Final = f"""
INSERT INTO ripple_runs AS r (run_id, workflow, input, idempotency_key, trace,
                              retention_seconds, debounce_key, available_at, blocked_by,
                              {_FLOW_COLUMNS})
SELECT DISTINCT ON (d.workflow, d.key)
       d.run_id, d.workflow, d.input, d.idempotency_key, d.trace, d.retention_seconds, d.key,
       now() + d.period * interval '1 second', 'debounce', 0,
       {_FLOW_VALUES.format(input="d.input", fair="NULL")}
FROM (
    SELECT b.*, coalesce(b.input #>> b.path, '') AS key
    FROM ROWS FROM (jsonb_to_recordset($1::jsonb)
         AS (run_id text, workflow text, input jsonb, idempotency_key text, trace jsonb,
             retention_seconds double precision, period double precision, path text[]))
         WITH ORDINALITY AS b(run_id, workflow, input, idempotency_key, trace,
                              retention_seconds, period, path, ord)
) AS d
LEFT JOIN ripple_flow_controls f ON f.workflow = d.workflow
WHERE NOT EXISTS (SELECT 1 FROM ripple_runs x
                  WHERE x.workflow = d.workflow AND x.idempotency_key = d.idempotency_key)
ORDER BY d.workflow, d.key, d.ord DESC
ON CONFLICT (workflow, debounce_key)
    WHERE status = 'pending' AND started_at IS NULL AND debounce_key IS NOT NULL
DO UPDATE SET
    input = excluded.input,
    available_at = coalesce(least(excluded.available_at, r.created_at + (
        SELECT f2.debounce_max_wait FROM ripple_flow_controls f2 WHERE f2.workflow = r.workflow
    ) * interval '1 second'), excluded.available_at),
    blocked_by = 'debounce',
    concurrency_key = excluded.concurrency_key, throttle_key = excluded.throttle_key,
    fairness_key = excluded.fairness_key, updated_at = now()
RETURNING r.run_id, r.xmax = 0 AS created
"""  # noqa: S608

# $1 workflow, $2 idempotency_key
_SELECT_RUN_BY_KEY: Final = """
SELECT run_id FROM ripple_runs WHERE workflow = $1 AND idempotency_key = $2
"""

# $1 workflow, $2 idempotency_key: an existing child run and how it ended (if it did).
_SELECT_CHILD_BY_KEY: Final = """
SELECT run_id, status, output, error FROM ripple_runs
WHERE workflow = $1 AND idempotency_key = $2
"""

# Runs created inside a publisher's transaction (topic fan-out), as one JSON array of {run_id,
# workflow, input, idempotency_key, trace, retention_seconds}. Inputs and traces arrive as JSON
# text (a publish encodes each payload once and every row reuses it).
_INSERT_RUNS_BATCH: Final = f"""
INSERT INTO ripple_runs (run_id, workflow, input, idempotency_key, trace, retention_seconds,
                         {_FLOW_COLUMNS})
SELECT r.run_id, r.workflow, r.input::jsonb, r.idempotency_key, r.trace::jsonb,
       r.retention_seconds, 0,
       {_FLOW_VALUES.format(input="r.input::jsonb", fair="NULL")}
FROM jsonb_to_recordset($1::jsonb)
     AS r(run_id text, workflow text, input text, idempotency_key text, trace text,
          retention_seconds float8)
LEFT JOIN ripple_flow_controls f ON f.workflow = r.workflow
ON CONFLICT (workflow, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
"""  # noqa: S608

# $1 run_id
_SELECT_RUN: Final = f"SELECT {RUN_COLUMNS} FROM ripple_runs WHERE run_id = $1"  # noqa: S608

# $1 run_id: what result() needs (not the input, which may be large).
_SELECT_RUN_OUTCOME: Final = "SELECT status, output, error FROM ripple_runs WHERE run_id = $1"

# $1 workflow|NULL, $2 status|NULL, $3 since|NULL, $4 until|NULL, $5 parent|NULL,
# $6 cursor (last run_id seen)|NULL, $7 limit; {where}: more conditions on the runs (aliased
# `r`), the run search's (`search`), with their parameters from $8 on
LIST_RUNS: Final = f"""
SELECT {RUN_COLUMNS} FROM ripple_runs r
WHERE ($1::text IS NULL OR r.workflow = $1)
  AND ($2::text IS NULL OR r.status = $2)
  AND ($3::timestamptz IS NULL OR r.created_at >= $3)
  AND ($4::timestamptz IS NULL OR r.created_at < $4)
  AND ($5::text IS NULL OR r.parent_run_id = $5)
  AND ($6::text IS NULL OR r.run_id < $6){{where}}
ORDER BY r.run_id DESC
LIMIT $7
"""  # noqa: S608
_LIST_RUNS: Final = LIST_RUNS.format(where="")

# $1 run ids text[]: which of them were canceled.
_SELECT_CANCELED: Final = """
SELECT run_id FROM ripple_runs WHERE run_id = ANY($1::text[]) AND status = 'canceled'
"""

# $1 run_id: lock any run (signals, child completion), returns its status.
_LOCK_RUN: Final = "SELECT status FROM ripple_runs WHERE run_id = $1 FOR UPDATE"

# The active child runs a race's losing branches started. $1 run_id, $2 prefixes text[]
_SELECT_CHILDREN_UNDER: Final = """
SELECT r.run_id FROM ripple_runs r, unnest($2::text[]) AS t(prefix)
WHERE r.parent_run_id = $1 AND left(r.parent_step_key, length(t.prefix)) = t.prefix
  AND r.status IN ('pending', 'running', 'sleeping', 'waiting')
ORDER BY r.run_id
"""

# Cancel runs and all their active descendants, each with the error a `WorkflowCanceled` for
# it names (plus why, for a race's losing branch). $1 root run ids text[], $2 reason (or NULL)
_CANCEL_TREES: Final = """
WITH RECURSIVE tree(run_id) AS (
    SELECT run_id FROM ripple_runs WHERE run_id = ANY($1::text[])
    UNION
    SELECT c.run_id FROM ripple_runs c JOIN tree t ON c.parent_run_id = t.run_id
)
UPDATE ripple_runs r
SET status = 'canceled', epoch = r.epoch + 1,
    error = jsonb_build_object('type', 'WorkflowCanceled',
                               'message', 'run ' || r.run_id || ' was canceled'
                                          || coalesce(': ' || $2::text, '')),
    completed_at = now(), available_at = now(), lease_owner = NULL, updated_at = now()
FROM tree
WHERE r.run_id = tree.run_id AND r.status IN ('pending', 'running', 'sleeping', 'waiting')
RETURNING r.run_id, r.workflow, r.parent_run_id, r.parent_step_key, r.parent_step_seq, r.error
"""


class RunOutcome(NamedTuple):
    """How a run stands: what `result()` needs (not the input, which may be large)."""

    status: str
    output: Any
    error: dict[str, Any] | None


class Debounced(NamedTuple):
    """The run a debounced start went to, and whether that start created it."""

    run_id: str
    created: bool


@dataclass(frozen=True, slots=True)
class ChildRun:
    """An existing child run found by its idempotency key, and how it ended (if it did)."""

    run_id: str
    status: str
    output: Any
    error: dict[str, Any] | None


async def insert_run(
    conn: Executor,
    *,
    run_id: str,
    workflow: str,
    version: int | None,
    input: Any,
    idempotency_key: str | None,
    deadline: datetime | None,
    retention_seconds: float | None,
    trace: dict[str, str] | None,
    priority: int,
    fairness_key: str | None = None,
) -> bool:
    """Create a top-level run; False if its idempotency key names an existing run."""
    created = await conn.fetchval(
        _INSERT_RUN,
        run_id,
        workflow,
        version,
        input,
        idempotency_key,
        deadline,
        retention_seconds,
        trace,
        None,
        None,
        None,
        priority,
        fairness_key,
    )
    return created is not None


async def insert_child_run(
    conn: Executor,
    *,
    run_id: str,
    workflow: str,
    version: int | None,
    input: Any,
    idempotency_key: str,
    trace: dict[str, str] | None,
    parent_run_id: str,
    parent_step_key: str,
    parent_step_seq: int,
) -> bool:
    """Create a child run (priority 0) of a parent's step; False if its key exists already."""
    created = await conn.fetchval(
        _INSERT_RUN,
        run_id,
        workflow,
        version,
        input,
        idempotency_key,
        None,
        None,
        trace,
        parent_run_id,
        parent_step_key,
        parent_step_seq,
        0,
        None,
    )
    return created is not None


async def start_runs(conn: Executor, *, starts: Sequence[dict[str, Any]]) -> set[str]:
    """Create the runs of many starts in one statement (the start group commit); each start is
    `{run_id, workflow, version, input, idempotency_key, deadline, retention_seconds, trace,
    priority, fairness_key}`. Returns the ids of the runs created (a start whose key exists
    creates none)."""
    return {row[0] for row in await conn.fetch(_START_RUNS, starts)}


async def debounce_run(
    conn: Executor,
    *,
    run_id: str,
    workflow: str,
    version: int | None,
    input: Any,
    idempotency_key: str | None,
    deadline: datetime | None,
    retention_seconds: float | None,
    trace: dict[str, str] | None,
    priority: int,
    period: float,
    max_wait: float | None,
    key_path: list[str] | None,
    fairness_key: str | None = None,
) -> Debounced:
    """Collapse a start into its debounce key's pending run, or create one due after `period`."""
    row = await conn.fetchrow(
        _DEBOUNCE_RUN,
        run_id,
        workflow,
        version,
        input,
        idempotency_key,
        deadline,
        retention_seconds,
        trace,
        priority,
        period,
        max_wait,
        key_path,
        fairness_key,
    )
    assert row is not None  # inserted or updated
    return Debounced(str(row["run_id"]), bool(row["created"]))


async def debounce_runs(conn: Executor, *, runs: Sequence[dict[str, Any]]) -> int:
    """A publish's debounced runs (`{run_id, workflow, input, idempotency_key, trace,
    retention_seconds, period, path}`, in publish order); rows created or updated."""
    return len(await conn.fetch(_DEBOUNCE_RUNS_BATCH, runs))


async def insert_runs(
    conn: Executor,
    *,
    run_ids: Sequence[str],
    workflows: Sequence[str],
    inputs: Sequence[str | None],
    idempotency_keys: Sequence[str | None],
    traces: Sequence[str | None],
    retention_seconds: Sequence[float | None],
) -> int:
    """A publish's runs as parallel arrays (inputs and traces as JSON text); how many were
    created (a repeated idempotency key creates none)."""
    # One JSON document, not six parallel arrays (asyncpg type-checks every array element).
    doc = [
        {
            "run_id": r,
            "workflow": w,
            "input": i,
            "idempotency_key": k,
            "trace": t,
            "retention_seconds": s,
        }
        for r, w, i, k, t, s in zip(
            run_ids, workflows, inputs, idempotency_keys, traces, retention_seconds, strict=True
        )
    ]
    status = await conn.execute(_INSERT_RUNS_BATCH, doc)
    return command_count(status)


async def find_run_by_key(conn: Executor, *, workflow: str, idempotency_key: str) -> str | None:
    """The id of the run `idempotency_key` created, or None."""
    run_id = await conn.fetchval(_SELECT_RUN_BY_KEY, workflow, idempotency_key)
    return None if run_id is None else str(run_id)


async def find_child_by_key(
    conn: Executor, *, workflow: str, idempotency_key: str
) -> ChildRun | None:
    """An existing child run by its idempotency key."""
    row = await conn.fetchrow(_SELECT_CHILD_BY_KEY, workflow, idempotency_key)
    if row is None:
        return None
    return ChildRun(row["run_id"], row["status"], row["output"], row["error"])


async def read_run(conn: Executor, *, run_id: str) -> Run | None:
    row = await conn.fetchrow(_SELECT_RUN, run_id)
    return None if row is None else Run.from_row(row)


async def read_run_outcome(conn: Executor, *, run_id: str) -> RunOutcome | None:
    row = await conn.fetchrow(_SELECT_RUN_OUTCOME, run_id)
    return None if row is None else RunOutcome(row[0], row[1], row[2])


async def list_runs(
    conn: Executor,
    *,
    workflow: str | None,
    status: str | None,
    since: datetime | None,
    until: datetime | None,
    parent_run_id: str | None,
    cursor: str | None,
    limit: int,
    where: tuple[str, Sequence[Any]] | None = None,
) -> list[Run]:
    """Runs newest first (by id), after `cursor`; `where`: a condition on the runs and its
    parameters, as `search.compile_where` makes them."""
    statement, params = _LIST_RUNS, ()
    if where is not None:
        statement, params = LIST_RUNS.format(where="\n  AND " + where[0]), tuple(where[1])
    rows = await conn.fetch(
        statement, workflow, status, since, until, parent_run_id, cursor, limit, *params
    )
    return [Run.from_row(row) for row in rows]


async def lock_run(conn: Executor, *, run_id: str) -> str | None:
    """Lock a run's row to commit (signals, child completion); its status, None if none."""
    status: str | None = await conn.fetchval(_LOCK_RUN, run_id)
    return status


async def cancel_trees(
    conn: Executor, *, run_ids: Sequence[str], reason: str | None = None
) -> list[CanceledRun]:
    """Cancel these runs and their active descendants: the runs canceled (none if all had
    ended). The one cancel statement of single, bulk and race-loser cancels.

    The statement repeats until it cancels nothing: a child started by a descendant whose
    lock an earlier statement waited for becomes visible only to a later statement.
    """
    canceled: list[CanceledRun] = []
    while rows := await conn.fetch(_CANCEL_TREES, list(run_ids), reason):
        canceled += [CanceledRun.from_row(row) for row in rows]
    return canceled


async def select_children_under(
    conn: Executor, *, run_id: str, prefixes: Sequence[str]
) -> list[str]:
    """The active child runs started by the steps under `prefixes` (a race's losing branches)."""
    return [row[0] for row in await conn.fetch(_SELECT_CHILDREN_UNDER, run_id, list(prefixes))]


async def select_canceled(conn: Executor, *, run_ids: Sequence[str]) -> set[str]:
    """Which of these runs are canceled."""
    return {row[0] for row in await conn.fetch(_SELECT_CANCELED, list(run_ids))}
