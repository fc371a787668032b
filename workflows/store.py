"""The workflow runtime's SQL: runs, journal, waits, inbox. Every function takes a connection so
callers compose one transaction; every write a worker makes for a run names the fencing epoch it
claimed with. No other workflows module holds SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ripple.platform.db import Connection

__all__ = ["ClaimedRun", "JournalRow"]

_RUN_COLUMNS: Final = (
    "run_id, workflow, version, status, input, output, error, attempt, created_at, started_at, "
    "completed_at, parent_run_id, deadline, idempotency_key, priority, blocked_by, forked_from"
)

# Every statement creating runs reads the workflow's ripple_flow_controls row (if any) and
# stores the run's concurrency and throttle keys (read from the input by their paths; "" when
# the path is missing or there is none) and limits with it.
_FLOW_COLUMNS: Final = (
    "priority, concurrency_key, concurrency_limit, throttle_key, throttle_limit, throttle_period"
)
_FLOW_VALUES: Final = """
       CASE WHEN f.concurrency_limit IS NOT NULL
            THEN coalesce({input} #>> f.concurrency_key, '') END,
       f.concurrency_limit,
       CASE WHEN f.throttle_limit IS NOT NULL THEN coalesce({input} #>> f.throttle_key, '') END,
       f.throttle_limit, f.throttle_period"""

# $1 run_id, $2 workflow, $3 version, $4 input, $5 idempotency_key, $6 deadline,
# $7 retention_seconds, $8 trace, $9 parent_run_id, $10 parent_step_key, $11 parent_step_seq
# (INSERT_RUN_PRIORITIZED: $12 priority; INSERT_RUN creates priority 0, e.g. children)
_INSERT_RUN: Final = f"""
INSERT INTO ripple_runs (run_id, workflow, version, input, idempotency_key, deadline,
                         retention_seconds, trace, parent_run_id, parent_step_key, parent_step_seq,
                         {_FLOW_COLUMNS})
SELECT $1, $2, $3, $4::jsonb, $5, $6, $7, $8::jsonb, $9, $10, $11, {{priority}},
       {_FLOW_VALUES.format(input="$4::jsonb")}
FROM (VALUES (1)) AS one (x) LEFT JOIN ripple_flow_controls f ON f.workflow = $2
ON CONFLICT (workflow, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
RETURNING run_id
"""  # noqa: S608
INSERT_RUN: Final = _INSERT_RUN.format(priority="0")
INSERT_RUN_PRIORITIZED: Final = _INSERT_RUN.format(priority="$12::int")

# Group commit of concurrent starts (`WorkflowClient.start` without a caller's transaction):
# the runs of many starts in one statement; returns the ids of the runs it created (a start
# whose idempotency key exists already creates none: the caller looks the key up).
# $1 jsonb array of {run_id, workflow, version, input, idempotency_key, deadline,
# retention_seconds, trace, priority}
START_RUNS: Final = f"""
INSERT INTO ripple_runs (run_id, workflow, version, input, idempotency_key, deadline,
                         retention_seconds, trace, {_FLOW_COLUMNS})
SELECT r.run_id, r.workflow, r.version, r.input, r.idempotency_key, r.deadline,
       r.retention_seconds, r.trace, r.priority, {_FLOW_VALUES.format(input="r.input")}
FROM jsonb_to_recordset($1::jsonb)
     AS r(run_id text, workflow text, version int, input jsonb, idempotency_key text,
          deadline timestamptz, retention_seconds double precision, trace jsonb, priority int)
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
# $12 debounce key path text[] (NULL: one shared key)
DEBOUNCE_RUN: Final = f"""
INSERT INTO ripple_runs AS r (run_id, workflow, version, input, idempotency_key, deadline,
                              retention_seconds, trace, debounce_key, available_at,
                              blocked_by, {_FLOW_COLUMNS})
SELECT $1, $2, $3, $4::jsonb, $5, $6, $7, $8::jsonb,
       coalesce($4::jsonb #>> $12::text[], ''), now() + $10 * interval '1 second', 'debounce',
       $9::int, {_FLOW_VALUES.format(input="$4::jsonb")}
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
    updated_at = now()
RETURNING r.run_id, r.xmax = 0 AS created
"""  # noqa: S608

# The same for a publish's workflow runs: $1 jsonb array of {run_id, workflow, input,
# idempotency_key, trace, retention_seconds, period, path}, in publish order (max wait: the
# workflow's ripple_flow_controls row); per key
# the last one wins. Runs whose idempotency key exists already (a re-delivered event) are
# skipped. Returns one row per run created or updated.
DEBOUNCE_RUNS_BATCH: Final = f"""
INSERT INTO ripple_runs AS r (run_id, workflow, input, idempotency_key, trace,
                              retention_seconds, debounce_key, available_at, blocked_by,
                              {_FLOW_COLUMNS})
SELECT DISTINCT ON (d.workflow, d.key)
       d.run_id, d.workflow, d.input, d.idempotency_key, d.trace, d.retention_seconds, d.key,
       now() + d.period * interval '1 second', 'debounce', 0,
       {_FLOW_VALUES.format(input="d.input")}
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
    updated_at = now()
RETURNING r.run_id, r.xmax = 0 AS created
"""  # noqa: S608

# A workflow's flow-control options as its definition declares them (see workflows/flow.py
# flow_control_row). $1 workflow, $2 concurrency limit, $3 its key path text[], $4 throttle
# limit, $5 period seconds, $6 key path, $7 debounce period, $8 max wait, $9 key path
UPSERT_FLOW_CONTROL: Final = """
INSERT INTO ripple_flow_controls AS f (workflow, concurrency_limit, concurrency_key,
    throttle_limit, throttle_period, throttle_key, debounce_period, debounce_max_wait,
    debounce_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (workflow) DO UPDATE
SET concurrency_limit = excluded.concurrency_limit, concurrency_key = excluded.concurrency_key,
    throttle_limit = excluded.throttle_limit, throttle_period = excluded.throttle_period,
    throttle_key = excluded.throttle_key, debounce_period = excluded.debounce_period,
    debounce_max_wait = excluded.debounce_max_wait, debounce_key = excluded.debounce_key,
    updated_at = now()
WHERE (f.concurrency_limit, f.concurrency_key, f.throttle_limit, f.throttle_period,
       f.throttle_key, f.debounce_period, f.debounce_max_wait, f.debounce_key)
      IS DISTINCT FROM
      (excluded.concurrency_limit, excluded.concurrency_key, excluded.throttle_limit,
       excluded.throttle_period, excluded.throttle_key, excluded.debounce_period,
       excluded.debounce_max_wait, excluded.debounce_key)
"""

# $1 workflow names text[]: they declare no flow control (any more).
DELETE_FLOW_CONTROLS: Final = "DELETE FROM ripple_flow_controls WHERE workflow = ANY($1::text[])"

# $1 workflow, $2 idempotency_key
SELECT_RUN_BY_KEY: Final = """
SELECT run_id FROM ripple_runs WHERE workflow = $1 AND idempotency_key = $2
"""

# $1 workflow, $2 idempotency_key: an existing child run and how it ended (if it did).
SELECT_CHILD_BY_KEY: Final = """
SELECT run_id, status, output, error FROM ripple_runs
WHERE workflow = $1 AND idempotency_key = $2
"""

# Runs created inside a publisher's transaction (topic fan-out), as parallel arrays. Inputs and
# traces arrive as JSON text (a publish encodes each payload once and every row reuses it).
# $1 run ids text[], $2 workflows text[], $3 inputs text[] (JSON), $4 idempotency keys text[],
# $5 traces text[] (JSON), $6 retention seconds float8[]
INSERT_RUNS_BATCH: Final = f"""
INSERT INTO ripple_runs (run_id, workflow, input, idempotency_key, trace, retention_seconds,
                         {_FLOW_COLUMNS})
SELECT r.run_id, r.workflow, r.input::jsonb, r.idempotency_key, r.trace::jsonb,
       r.retention_seconds, 0, {_FLOW_VALUES.format(input="r.input::jsonb")}
FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::float8[])
     AS r(run_id, workflow, input, idempotency_key, trace, retention_seconds)
LEFT JOIN ripple_flow_controls f ON f.workflow = r.workflow
ON CONFLICT (workflow, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
"""  # noqa: S608

# $1 run_id
SELECT_RUN: Final = f"SELECT {_RUN_COLUMNS} FROM ripple_runs WHERE run_id = $1"  # noqa: S608

# $1 run_id: what result() needs (not the input, which may be large).
SELECT_RUN_OUTCOME: Final = "SELECT status, output, error FROM ripple_runs WHERE run_id = $1"

# $1 run_id
SELECT_STEPS: Final = """
SELECT key, seq, kind, status, attempts, output, error, due_at, started_at, completed_at
FROM ripple_steps WHERE run_id = $1 ORDER BY seq, started_at
"""

# $1 workflow|NULL, $2 status|NULL, $3 since|NULL, $4 until|NULL, $5 parent|NULL,
# $6 cursor (last run_id seen)|NULL, $7 limit
LIST_RUNS: Final = f"""
SELECT {_RUN_COLUMNS} FROM ripple_runs
WHERE ($1::text IS NULL OR workflow = $1)
  AND ($2::text IS NULL OR status = $2)
  AND ($3::timestamptz IS NULL OR created_at >= $3)
  AND ($4::timestamptz IS NULL OR created_at < $4)
  AND ($5::text IS NULL OR parent_run_id = $5)
  AND ($6::text IS NULL OR run_id < $6)
ORDER BY run_id DESC
LIMIT $7
"""  # noqa: S608

# Claim due runs of the registered (workflow, version) pairs. A claim of a run that was
# `running` under another owner (its lease expired: the worker died or stalled) counts one
# recovery, the crash budget the engine checks (apart from any step's attempts).
# $1 worker_id, $2 lease seconds, $3 limit, $4 distinct workflow names text[],
# $5 names text[], $6 versions int[] (parallel arrays: the pairs this worker serves).
# due: per served workflow, its due active runs in availability order from ripple_runs_claim
# (stopping after $3), skipping rows other claimers hold; urgent: the same from
# ripple_runs_priority for pending runs with priority > 0; c: the $3 first of both, by
# priority then availability (FIFO within a priority).
# A run with NULL version is pinned to the newest version this worker serves for its name.
# The new epoch is higher than the last by a random amount (1 to 2^32), not by one: workers
# commit claims asynchronously, and a claim lost in a Postgres crash must not hand its epoch to
# the next claimer (see Worker); random, so it holds whatever the clocks do.
# Flow control (migration 0011), for pending runs with keys only (the rest pass untouched):
# t_*: a first start of a throttled run needs a start in its key's sliding window; the window
# row is upserted (ON CONFLICT locks it and sees its latest value, so concurrent claimers never
# grant more than the limit); runs over it are parked until the window has room for them, in
# order. k_*: then a pending run of a concurrency key needs a slot, granted the same way from
# ripple_concurrency_slots; runs over the limit are parked (available_at infinity) until a
# slot is freed (the trigger of migration 0011 wakes the next one). Rows are locked in key order.
CLAIM_RUNS: Final = """
WITH due AS (
    SELECT x.*
    FROM unnest($4::text[]) AS n(workflow)
    CROSS JOIN LATERAL (
        SELECT r.run_id, r.workflow, r.status AS prev_status, r.lease_owner AS prev_owner,
               r.started_at IS NULL AS fresh, r.available_at, r.priority, r.concurrency_key,
               r.concurrency_limit, r.throttle_key, r.throttle_limit, r.throttle_period
        FROM ripple_runs r
        WHERE r.workflow = n.workflow
          AND r.status IN ('pending', 'running', 'sleeping', 'waiting')
          AND r.available_at <= now()
          AND (r.version IS NULL OR (r.workflow, r.version) IN
               (SELECT p.w, p.v FROM unnest($5::text[], $6::int[]) AS p(w, v)))
        ORDER BY r.available_at
        LIMIT $3
        FOR UPDATE OF r SKIP LOCKED
    ) AS x
), urgent AS (
    SELECT x.*
    FROM unnest($4::text[]) AS n(workflow)
    CROSS JOIN LATERAL (
        SELECT r.run_id, r.workflow, r.status AS prev_status, r.lease_owner AS prev_owner,
               r.started_at IS NULL AS fresh, r.available_at, r.priority, r.concurrency_key,
               r.concurrency_limit, r.throttle_key, r.throttle_limit, r.throttle_period
        FROM ripple_runs r
        WHERE r.workflow = n.workflow
          AND r.status = 'pending' AND r.priority > 0 AND r.available_at < 'infinity'
          AND r.available_at <= now()
          AND (r.version IS NULL OR (r.workflow, r.version) IN
               (SELECT p.w, p.v FROM unnest($5::text[], $6::int[]) AS p(w, v)))
        ORDER BY r.priority DESC, r.available_at
        LIMIT $3
        FOR UPDATE OF r SKIP LOCKED
    ) AS x
), c AS (
    SELECT u.* FROM (SELECT * FROM due UNION SELECT * FROM urgent) AS u
    ORDER BY u.priority DESC, u.available_at, u.run_id
    LIMIT $3
), t_rank AS (
    SELECT c.run_id, c.workflow, c.throttle_key AS key,
           row_number() OVER (PARTITION BY c.workflow, c.throttle_key
                              ORDER BY c.priority DESC, c.available_at, c.run_id) AS rk
    FROM c WHERE c.throttle_key IS NOT NULL AND c.fresh AND c.prev_status = 'pending'
), t_slots AS (
    INSERT INTO ripple_throttle_windows AS w (workflow, key, starts, lim, period, granted)
    SELECT c.workflow, c.throttle_key,
           array_fill(now(), ARRAY[least(count(*), max(c.throttle_limit))::int]),
           max(c.throttle_limit), max(c.throttle_period), least(count(*), max(c.throttle_limit))
    FROM c WHERE c.throttle_key IS NOT NULL AND c.fresh AND c.prev_status = 'pending'
    GROUP BY c.workflow, c.throttle_key
    ORDER BY c.workflow, c.throttle_key
    ON CONFLICT (workflow, key) DO UPDATE
    SET granted = greatest(0, least(excluded.granted, excluded.lim - (
            SELECT count(*) FROM unnest(w.starts) AS s(t)
            WHERE s.t > now() - excluded.period * interval '1 second'))),
        starts = ARRAY(
            SELECT s.t FROM unnest(w.starts) AS s(t)
            WHERE s.t > now() - excluded.period * interval '1 second' ORDER BY s.t
        ) || array_fill(now(), ARRAY[greatest(0, least(excluded.granted, excluded.lim - (
            SELECT count(*) FROM unnest(w.starts) AS s(t)
            WHERE s.t > now() - excluded.period * interval '1 second')))::int]),
        lim = excluded.lim, period = excluded.period
    RETURNING w.workflow, w.key, w.granted, w.starts, w.lim, w.period
), c2 AS (
    SELECT c.* FROM c
    LEFT JOIN t_rank tr ON tr.run_id = c.run_id
    LEFT JOIN t_slots ts ON ts.workflow = tr.workflow AND ts.key = tr.key
    WHERE tr.run_id IS NULL OR tr.rk <= ts.granted
), k_rank AS (
    SELECT c2.run_id, c2.workflow, c2.concurrency_key AS key,
           row_number() OVER (PARTITION BY c2.workflow, c2.concurrency_key
                              ORDER BY c2.priority DESC, c2.available_at, c2.run_id) AS rk
    FROM c2 WHERE c2.concurrency_key IS NOT NULL AND c2.prev_status = 'pending'
), k_slots AS (
    INSERT INTO ripple_concurrency_slots AS s (workflow, key, active, lim, granted)
    SELECT c2.workflow, c2.concurrency_key, least(count(*), max(c2.concurrency_limit)),
           max(c2.concurrency_limit), least(count(*), max(c2.concurrency_limit))
    FROM c2 WHERE c2.concurrency_key IS NOT NULL AND c2.prev_status = 'pending'
    GROUP BY c2.workflow, c2.concurrency_key
    ORDER BY c2.workflow, c2.concurrency_key
    ON CONFLICT (workflow, key) DO UPDATE
    SET granted = greatest(0, least(excluded.granted, excluded.lim - s.active)),
        active = s.active + greatest(0, least(excluded.granted, excluded.lim - s.active)),
        lim = excluded.lim
    RETURNING s.workflow, s.key, s.granted
), ok AS (
    SELECT c2.* FROM c2
    LEFT JOIN k_rank kr ON kr.run_id = c2.run_id
    LEFT JOIN k_slots ks ON ks.workflow = kr.workflow AND ks.key = kr.key
    WHERE kr.run_id IS NULL OR kr.rk <= ks.granted
), parked AS (
    UPDATE ripple_runs r SET available_at = p.until, blocked_by = p.reason, updated_at = now()
    FROM (
        -- the j-th run over a full window (j from 0) fits when the window's (j mod lim)-th
        -- start leaves it, (j div lim) periods later
        SELECT tr.run_id, 'throttle' AS reason,
               ts.starts[(tr.rk - ts.granted - 1) % ts.lim + 1]
               + ((tr.rk - ts.granted - 1) / ts.lim + 1) * ts.period * interval '1 second'
               AS until
        FROM t_rank tr JOIN t_slots ts ON ts.workflow = tr.workflow AND ts.key = tr.key
        WHERE tr.rk > ts.granted
        UNION ALL
        SELECT kr.run_id, 'concurrency', 'infinity'::timestamptz
        FROM k_rank kr JOIN k_slots ks ON ks.workflow = kr.workflow AND ks.key = kr.key
        WHERE kr.rk > ks.granted
    ) AS p
    WHERE r.run_id = p.run_id
)
UPDATE ripple_runs r
SET status = 'running',
    epoch = r.epoch + 1 + floor(random() * 4294967296)::bigint,
    lease_owner = $1,
    available_at = now() + $2 * interval '1 second',
    attempt = greatest(r.attempt, 1),
    recoveries = r.recoveries + CASE WHEN c.prev_status = 'running'
                                          AND c.prev_owner IS NOT NULL THEN 1 ELSE 0 END,
    started_at = coalesce(r.started_at, now()),
    version = coalesce(r.version, (SELECT max(p.v) FROM unnest($5::text[], $6::int[]) AS p(w, v)
                                   WHERE p.w = r.workflow)),
    blocked_by = NULL,
    updated_at = now()
FROM ok AS c
WHERE r.run_id = c.run_id
RETURNING r.run_id, r.workflow, r.version, r.input, r.attempt, r.epoch, r.deadline, r.trace,
          r.step_count, r.created_at, r.parent_run_id, r.recoveries, c.prev_status,
          c.prev_owner, c.fresh, now() AS db_now, r.concurrency_key IS NOT NULL AS keyed
"""

# $1 distinct workflow names text[], $2 names text[], $3 versions int[] (the served pairs):
# seconds until the next run this worker may claim becomes available (NULL: none; negative:
# due but held by another claimer). One index probe per served workflow.
NEXT_DUE: Final = """
SELECT extract(epoch FROM min(x.available_at) - clock_timestamp())::float8
FROM unnest($1::text[]) AS n(workflow)
CROSS JOIN LATERAL (
    SELECT r.available_at FROM ripple_runs r
    WHERE r.workflow = n.workflow
      AND r.status IN ('pending', 'running', 'sleeping', 'waiting')
      AND r.available_at < 'infinity'
      AND (r.version IS NULL OR (r.workflow, r.version) IN
           (SELECT p.w, p.v FROM unnest($2::text[], $3::int[]) AS p(w, v)))
    ORDER BY r.available_at
    LIMIT 1
) AS x
"""

# $1 run ids text[]: which of them were canceled.
SELECT_CANCELED: Final = """
SELECT run_id FROM ripple_runs WHERE run_id = ANY($1::text[]) AND status = 'canceled'
"""

# $1 run ids text[]: the journals of several claimed runs at once.
SELECT_JOURNALS: Final = """
SELECT run_id, key, seq, kind, status, attempts, output, error, due_at
FROM ripple_steps WHERE run_id = ANY($1::text[])
"""

# $1 run_id: lock any run (signals, child completion), returns its status.
LOCK_RUN: Final = "SELECT status FROM ripple_runs WHERE run_id = $1 FOR UPDATE"

# Upsert journal entries; a completed or failed entry is never changed again.
# $1 run_id, $2 jsonb array of {key, seq, kind, status, attempts, output, error, due_at,
# started_at, completed_at}
UPSERT_STEPS: Final = """
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
# $5 jsonb array of journal entries (see UPSERT_STEPS)
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
FLUSH_RUN: Final = _FLUSH_HEAD + _STEPS_AFTER_RUN + "SELECT run_id FROM run"  # noqa: S608

# Group commit: the step flushes and simple completions of many runs in one statement. Each
# run is fenced by its own epoch: a run this worker no longer owns is left out (its entries are
# not journaled) without failing the others; the statement returns the runs it wrote. Rows are
# locked in run_id order (as LOCK_EVENT_WAIT_RUNS does), so two writers never deadlock. A run
# listed in $7 also finishes (as FINISH_RUN does; runs with a parent or open waits finish
# apart, in their own transaction). The others stay running: their row is only locked (the
# fence), not rewritten, unless $8 asks to renew the lease (and store the step count) — a
# row version per step would cost a new entry in every index of ripple_runs; the heartbeat
# renews leases, and a run that missed heartbeats renews its own (see `RunExecution`).
# $1 run ids text[], $2 epochs bigint[], $3 step counts int[], $4 lease seconds,
# $5 jsonb array of journal entries, each with its run_id (see UPSERT_STEPS),
# $6 jsonb array of {run_id, prefix}: journal entries to delete (trimmed loop iterations), in
# the same statement that records the later iteration,
# $7 jsonb array of {run_id, status, output, error}: the runs that finish,
# $8 renew bool[]: per run, extend its lease and store its step count.
COMMIT_RUNS: Final = """
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

# A race was decided: drop the waits of the losing branches (a later signal is not delivered to
# them). Runs after the fence. $1 run_id, $2 key prefixes of the losing branches text[]
DELETE_WAITS_UNDER: Final = """
DELETE FROM ripple_waits w USING unnest($2::text[]) AS t(prefix)
WHERE w.run_id = $1 AND left(w.step_key, length(t.prefix)) = t.prefix
"""

# The active child runs a race's losing branches started. $1 run_id, $2 prefixes text[]
SELECT_CHILDREN_UNDER: Final = """
SELECT r.run_id FROM ripple_runs r, unnest($2::text[]) AS t(prefix)
WHERE r.parent_run_id = $1 AND left(r.parent_step_key, length(t.prefix)) = t.prefix
  AND r.status IN ('pending', 'running', 'sleeping', 'waiting')
ORDER BY r.run_id
"""

# One round trip: fence, journal and finish a run (with its row locked to commit). Returns no
# row when fenced out. A run with open waits or a parent follows it with DELETE_RUN_WAITS and
# LOCK_RUN + COMPLETE_PARENT_STEP in the same transaction.
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
FINISH_RUN: Final = _FINISH_HEAD + _STEPS_AFTER_RUN + _FINISH_TAIL

# Suspend: runs after the fence (FLUSH_RUN) locked the run, so it sees every resolution
# committed before the lock.
# $1 run_id, $2 epoch, $3 status, $4 wake time (infinity: none), $5 step_count,
# $6 keys of waits/children the run is blocked on (any already resolved: available now)
SUSPEND_RUN: Final = """
UPDATE ripple_runs
SET status = $3,
    available_at = CASE WHEN EXISTS (
        SELECT 1 FROM ripple_steps s
        WHERE s.run_id = $1 AND s.key = ANY($6::text[]) AND s.status IN ('completed', 'failed')
    ) THEN now() ELSE $4 END,
    lease_owner = NULL, step_count = $5, updated_at = now()
WHERE run_id = $1 AND epoch = $2
RETURNING available_at
"""

# Workflow-level retry. $1 run_id, $2 epoch, $3 delay seconds, $4 error, $5 step_count
RETRY_RUN: Final = """
UPDATE ripple_runs
SET status = 'pending', attempt = attempt + 1, error = $4, step_count = $5,
    available_at = now() + $3 * interval '1 second', lease_owner = NULL, updated_at = now()
WHERE run_id = $1 AND epoch = $2
"""

# $1 run_id: a new attempt re-executes every step that has no recorded result.
DELETE_UNFINISHED_STEPS: Final = """
DELETE FROM ripple_steps WHERE run_id = $1 AND status <> 'completed'
"""

# Release a claimed run now (stopping worker). $1 run_id, $2 epoch
RELEASE_RUN: Final = """
UPDATE ripple_runs SET status = 'pending', available_at = now(), lease_owner = NULL
WHERE run_id = $1 AND epoch = $2 AND status = 'running'
"""

# Heartbeat. Rows are locked in run_id order, as the group commit (COMMIT_RUNS) locks them:
# a heartbeat and a commit batch of the same worker never deadlock.
# $1 run ids text[], $2 epochs bigint[], $3 lease seconds
EXTEND_LEASES: Final = """
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
# after LOCK_RUN on the parent, so a parent suspending at this moment sees the result).
# $1 parent run_id, $2 entry jsonb {key, seq, kind, status, attempts, output, error}
COMPLETE_PARENT_STEP: Final = """
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

# Inbox: the earliest buffered signal `name` of the run whose payload contains `match`.
# $1 run_id, $2 name, $3 match|NULL
CONSUME_SIGNAL: Final = """
DELETE FROM ripple_signals WHERE id = (
    SELECT id FROM ripple_signals
    WHERE run_id = $1 AND name = $2 AND ($3::jsonb IS NULL OR payload @> $3::jsonb)
    ORDER BY id LIMIT 1 FOR UPDATE
) RETURNING payload
"""

# $1 run_id, $2 step_key, $3 step_seq, $4 name, $5 event, $6 match, $7 expires_at
INSERT_WAIT: Final = """
INSERT INTO ripple_waits (run_id, step_key, step_seq, name, event, match, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING
"""

# $1 run_id, $2 step_key
DELETE_WAIT: Final = "DELETE FROM ripple_waits WHERE run_id = $1 AND step_key = $2 RETURNING 1"

# $1 run_id
DELETE_RUN_WAITS: Final = "DELETE FROM ripple_waits WHERE run_id = $1"

# Signal to one run, after LOCK_RUN (so a run suspending at this moment sees the outcome):
# resolve its earliest wait `name` whose match the payload contains, journaling the payload as
# that wait's result and making the run available; else keep the signal in the run's inbox.
# Returns whether a wait was resolved. $1 run_id, $2 name, $3 payload
SIGNAL_RUN: Final = """
WITH hit AS (
    DELETE FROM ripple_waits w
    WHERE (w.run_id, w.step_key) = (
        SELECT x.run_id, x.step_key FROM ripple_waits x
        WHERE x.run_id = $1 AND x.name = $2 AND (x.match IS NULL OR $3::jsonb @> x.match)
        ORDER BY x.created_at, x.step_seq LIMIT 1
    ) RETURNING w.step_key, w.step_seq
), journaled AS (
    INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, output, started_at,
                              completed_at)
    SELECT $1, hit.step_key, hit.step_seq, 'wait', 'completed', 1, $3, now(), now() FROM hit
    ON CONFLICT (run_id, key) DO UPDATE
    SET status = 'completed', output = excluded.output, completed_at = excluded.completed_at
    WHERE ripple_steps.status NOT IN ('completed', 'failed')
), woken AS (
    UPDATE ripple_runs SET available_at = now()
    WHERE run_id = $1 AND status IN ('waiting', 'sleeping') AND EXISTS (SELECT 1 FROM hit)
), buffered AS (
    INSERT INTO ripple_signals (run_id, name, payload)
    SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM hit)
)
SELECT EXISTS (SELECT 1 FROM hit)
"""

# Signal idempotency (ripple_signal_keys). Taken first in a signal's transaction: a concurrent
# call with the same key waits here for the first to commit (or roll back), then inserts nothing.
# Returns a row only for the first call. $1 scope (`run:<id>` / `event:<name>`), $2 key
CLAIM_SIGNAL_KEY: Final = """
INSERT INTO ripple_signal_keys (scope, idempotency_key) VALUES ($1, $2)
ON CONFLICT DO NOTHING RETURNING 1
"""

# The first call's answer, for a repeat. $1 scope, $2 key
SELECT_SIGNAL_KEY: Final = """
SELECT result FROM ripple_signal_keys WHERE scope = $1 AND idempotency_key = $2
"""

# Record the first call's answer, in its transaction. $1 scope, $2 key, $3 result jsonb
RECORD_SIGNAL_KEY: Final = """
UPDATE ripple_signal_keys SET result = $3 WHERE scope = $1 AND idempotency_key = $2
"""

# Event waits: lock the runs with a candidate wait first (ordered, so publishers never
# deadlock), so a run that is suspending sees the resolution. $1 event, $2 payload
LOCK_EVENT_WAIT_RUNS: Final = """
SELECT r.run_id FROM ripple_runs r
WHERE r.run_id IN (
    SELECT w.run_id FROM ripple_waits w
    WHERE w.event = $1 AND (w.match IS NULL OR $2::jsonb @> w.match)
)
ORDER BY r.run_id
FOR UPDATE OF r
"""

# Resolve every wait on `event` whose match the payload contains, of the runs LOCK_EVENT_WAIT_RUNS
# locked, journal the payload as the wait step's result, and make those runs available. Only
# locked runs: a wait registered after that lock's snapshot belongs to a run that may be
# suspending unseen (it would miss its wake-up); it waits for the next matching event.
# $1 event, $2 payload, $3 locked run ids
RESOLVE_EVENT_WAITS: Final = """
WITH hit AS (
    DELETE FROM ripple_waits w
    WHERE w.event = $1 AND (w.match IS NULL OR $2::jsonb @> w.match)
      AND w.run_id = ANY($3::text[])
    RETURNING w.run_id, w.step_key, w.step_seq
), journaled AS (
    INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, output, started_at,
                              completed_at)
    SELECT hit.run_id, hit.step_key, hit.step_seq, 'wait', 'completed', 1, $2, now(), now()
    FROM hit
    ON CONFLICT (run_id, key) DO UPDATE
    SET status = 'completed', output = excluded.output, completed_at = excluded.completed_at
    WHERE ripple_steps.status NOT IN ('completed', 'failed')
), woken AS (
    UPDATE ripple_runs r SET available_at = now()
    WHERE r.run_id IN (SELECT hit.run_id FROM hit) AND r.status IN ('waiting', 'sleeping')
)
SELECT count(*) FROM hit
"""

# Cancel a run and all its active descendants. $1 run_id, $2 error
CANCEL_TREE: Final = """
WITH RECURSIVE tree(run_id) AS (
    SELECT run_id FROM ripple_runs WHERE run_id = $1
    UNION
    SELECT c.run_id FROM ripple_runs c JOIN tree t ON c.parent_run_id = t.run_id
)
UPDATE ripple_runs r
SET status = 'canceled', epoch = r.epoch + 1, error = $2, completed_at = now(),
    available_at = now(), lease_owner = NULL, updated_at = now()
FROM tree
WHERE r.run_id = tree.run_id AND r.status IN ('pending', 'running', 'sleeping', 'waiting')
RETURNING r.run_id, r.workflow, r.parent_run_id, r.parent_step_key, r.parent_step_seq,
          r.created_at, r.error
"""

# $1 run ids text[]
DELETE_WAITS_OF: Final = "DELETE FROM ripple_waits WHERE run_id = ANY($1::text[])"

# $1 run_id, $2 key
SELECT_STEP: Final = """
SELECT key, seq, kind, status, attempts, output, error, due_at
FROM ripple_steps WHERE run_id = $1 AND key = $2
"""

# Fail a pending child/wait step on timeout unless it was resolved first.
# $1 run_id, $2 key, $3 error
TIME_OUT_STEP: Final = """
UPDATE ripple_steps SET status = 'failed', error = $3, completed_at = now()
WHERE run_id = $1 AND key = $2 AND status NOT IN ('completed', 'failed')
RETURNING 1
"""

# Worker registry. $1 worker_id, $2 hostname, $3 pid, $4 serves
REGISTER_WORKER: Final = """
INSERT INTO ripple_workers (worker_id, hostname, pid, serves) VALUES ($1, $2, $3, $4)
ON CONFLICT (worker_id) DO UPDATE SET serves = excluded.serves, heartbeat_at = now()
"""
# $1 worker_id
HEARTBEAT_WORKER: Final = "UPDATE ripple_workers SET heartbeat_at = now() WHERE worker_id = $1"
# $1 worker_id
DELETE_WORKER: Final = "DELETE FROM ripple_workers WHERE worker_id = $1"


@dataclass(frozen=True, slots=True)
class ClaimedRun:
    """A run this worker just claimed, with the epoch all its writes must name."""

    run_id: str
    workflow: str
    version: int
    input: Any
    attempt: int
    epoch: int
    deadline: datetime | None
    trace: dict[str, str] | None
    step_count: int
    created_at: datetime
    parent_run_id: str | None
    #: claimed after its previous worker's lease expired (it died or stalled)
    recovered: bool
    #: how many times that has happened to this run (the crash budget's count)
    recoveries: int
    #: never claimed before: no journal to load
    fresh: bool
    db_now: datetime
    #: holds a concurrency slot (its end frees it for a parked run of its workflow)
    keyed: bool = False

    @classmethod
    def from_row(cls, row: Any) -> ClaimedRun:
        return cls(
            run_id=row["run_id"],
            workflow=row["workflow"],
            version=row["version"],
            input=row["input"],
            attempt=row["attempt"],
            epoch=row["epoch"],
            deadline=row["deadline"],
            trace=row["trace"],
            step_count=row["step_count"],
            created_at=row["created_at"],
            parent_run_id=row["parent_run_id"],
            recovered=row["prev_status"] == "running" and row["prev_owner"] is not None,
            recoveries=row["recoveries"],
            fresh=row["fresh"],
            db_now=row["db_now"],
            keyed=row["keyed"],
        )


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


async def claim_runs(
    conn: Connection,
    worker_id: str,
    lease: float,
    limit: int,
    pairs: Sequence[tuple[str, int]],
) -> list[ClaimedRun]:
    """Claim up to `limit` due runs of the given (workflow, version) pairs."""
    names = [p[0] for p in pairs]
    versions = [p[1] for p in pairs]
    rows = await conn.fetch(
        CLAIM_RUNS, worker_id, lease, limit, sorted(set(names)), names, versions
    )
    return [ClaimedRun.from_row(row) for row in rows]


async def load_journals(conn: Connection, run_ids: list[str]) -> dict[str, list[JournalRow]]:
    """Journals of several runs, by run id."""
    out: dict[str, list[JournalRow]] = {run_id: [] for run_id in run_ids}
    if run_ids:
        for row in await conn.fetch(SELECT_JOURNALS, run_ids):
            out[row["run_id"]].append(JournalRow.from_row(row))
    return out


async def next_due(conn: Connection, pairs: Sequence[tuple[str, int]]) -> float | None:
    """Seconds until the next run this worker may claim is due (None: none is scheduled)."""
    names = [p[0] for p in pairs]
    value: float | None = await conn.fetchval(
        NEXT_DUE, sorted(set(names)), names, [p[1] for p in pairs]
    )
    return value


async def sync_flow_controls(conn: Connection | Any, rows: Sequence[tuple[Any, ...]]) -> None:
    """Store the flow-control options of workflows: `rows` are (name, options-or-None)."""
    gone = [row[0] for row in rows if row[1] is None]
    for name, options in rows:
        if options is not None:
            await conn.execute(UPSERT_FLOW_CONTROL, name, *options)
    if gone:
        await conn.execute(DELETE_FLOW_CONTROLS, gone)


# -- Operating runs (issue 16): retry, fork, bulk cancel/retry ---------------------------------
# Used by ripple.workflows.operations; the lead's sections above are unchanged.

# $1 run_id: lock a run and read what retry/fork check.
LOCK_RUN_FOR_OPERATION: Final = """
SELECT run_id, workflow, status, input FROM ripple_runs WHERE run_id = $1 FOR UPDATE
"""

# A batch of runs matching a bulk filter, locked, in run id order after a cursor. A row a
# worker changes meanwhile is re-checked against the filter once its lock is released (READ
# COMMITTED re-evaluation), so a run that no longer matches is not returned.
# $1 workflow|NULL, $2 statuses text[], $3 created at or after|NULL, $4 created before,
# $5 cursor (last run_id seen, '' at first), $6 limit
SELECT_RUN_BATCH: Final = """
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

# How many runs a bulk action would act on now (its dry run; same filter as SELECT_RUN_BATCH).
# $1 workflow|NULL, $2 statuses text[], $3 created at or after|NULL, $4 created before
COUNT_RUN_FILTER: Final = """
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
RETRY_RUNS: Final = """
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
    step_count = 0, epoch = r.epoch + 1, updated_at = now()
FROM runs
WHERE r.run_id = runs.run_id
RETURNING r.run_id, r.workflow
"""

# Cancel runs and all their active descendants (bulk CANCEL_TREE). $1 root run ids text[]
CANCEL_TREES: Final = """
WITH RECURSIVE tree(run_id) AS (
    SELECT run_id FROM ripple_runs WHERE run_id = ANY($1::text[])
    UNION
    SELECT c.run_id FROM ripple_runs c JOIN tree t ON c.parent_run_id = t.run_id
)
UPDATE ripple_runs r
SET status = 'canceled', epoch = r.epoch + 1,
    error = jsonb_build_object('type', 'WorkflowCanceled',
                               'message', 'run ' || r.run_id || ' was canceled'),
    completed_at = now(), available_at = now(), lease_owner = NULL, updated_at = now()
FROM tree
WHERE r.run_id = tree.run_id AND r.status IN ('pending', 'running', 'sleeping', 'waiting')
RETURNING r.run_id, r.workflow, r.parent_run_id, r.parent_step_key, r.parent_step_seq, r.error
"""

# $1 run_id, $2 key: the journal position of a step.
SELECT_STEP_SEQ: Final = "SELECT seq FROM ripple_steps WHERE run_id = $1 AND key = $2"

# $1 run_id: the step keys of a run in journal order (for error messages).
SELECT_STEP_KEYS: Final = """
SELECT key FROM ripple_steps WHERE run_id = $1 AND seq >= 0 ORDER BY seq LIMIT 50
"""

# A fork: a new pending run of the same workflow on the newest version served (version NULL),
# recording its origin. started_at is set: a run never started is claimed without reading its
# journal (ClaimedRun.fresh), and a fork has one. $1 new run_id, $2 source run_id, $3 input
INSERT_FORK: Final = """
INSERT INTO ripple_runs (run_id, workflow, version, input, retention_seconds, forked_from,
                         started_at)
SELECT $1, workflow, NULL, $3, retention_seconds, run_id, now()
FROM ripple_runs WHERE run_id = $2
RETURNING workflow
"""

# The fork's journal: the source's finished entries before position $3.
# $1 new run_id, $2 source run_id, $3 seq of from_step
COPY_JOURNAL: Final = """
INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, output, error,
                          started_at, completed_at)
SELECT $1, key, seq, kind, status, attempts, output, error, started_at, completed_at
FROM ripple_steps
WHERE run_id = $2 AND seq >= 0 AND seq < $3 AND status IN ('completed', 'failed')
"""
