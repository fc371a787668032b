"""Claiming runs under flow control (concurrency slots, throttle windows), when the next run
is due, the stored flow-control options, and the worker registry. SQL private to this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, NamedTuple

from ripple.workflows.store.rows import Executor

__all__ = [
    "ClaimedRun",
    "PlainClaim",
    "claim_runs",
    "claim_runs_plain",
    "delete_worker",
    "heartbeat_worker",
    "next_due",
    "register_worker",
    "sync_flow_controls",
]

# A workflow's flow-control options as its definition declares them (see workflows/authoring/flow.py
# flow_control_row). $1 workflow, $2 concurrency limit, $3 its key path text[], $4 throttle
# limit, $5 period seconds, $6 key path, $7 debounce period, $8 max wait, $9 key path,
# $10 fairness bool, $11 its key path, $12 weights jsonb
_UPSERT_FLOW_CONTROL: Final = """
INSERT INTO ripple_flow_controls AS f (workflow, concurrency_limit, concurrency_key,
    throttle_limit, throttle_period, throttle_key, debounce_period, debounce_max_wait,
    debounce_key, fairness, fairness_key_path, fairness_weights)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb)
ON CONFLICT (workflow) DO UPDATE
SET concurrency_limit = excluded.concurrency_limit, concurrency_key = excluded.concurrency_key,
    throttle_limit = excluded.throttle_limit, throttle_period = excluded.throttle_period,
    throttle_key = excluded.throttle_key, debounce_period = excluded.debounce_period,
    debounce_max_wait = excluded.debounce_max_wait, debounce_key = excluded.debounce_key,
    fairness = excluded.fairness, fairness_key_path = excluded.fairness_key_path,
    fairness_weights = excluded.fairness_weights, updated_at = now()
WHERE (f.concurrency_limit, f.concurrency_key, f.throttle_limit, f.throttle_period,
       f.throttle_key, f.debounce_period, f.debounce_max_wait, f.debounce_key, f.fairness,
       f.fairness_key_path, f.fairness_weights)
      IS DISTINCT FROM
      (excluded.concurrency_limit, excluded.concurrency_key, excluded.throttle_limit,
       excluded.throttle_period, excluded.throttle_key, excluded.debounce_period,
       excluded.debounce_max_wait, excluded.debounce_key, excluded.fairness,
       excluded.fairness_key_path, excluded.fairness_weights)
"""

# $1 workflow names text[]: they are not fair (any more). Their pending runs that a fair
# version keyed go back to the plain claim (FIFO within a priority); none: two index probes
# each (ripple_runs_fair, and ripple_runs_parked for the ones concurrency parked).
_UNFAIR_RUNS: Final = """
UPDATE ripple_runs SET fairness_key = NULL
WHERE ctid = ANY(ARRAY(
    SELECT r.ctid FROM ripple_runs r
    WHERE r.workflow = ANY($1::text[]) AND r.status = 'pending' AND r.fairness_key IS NOT NULL
      AND r.available_at < 'infinity'
    UNION ALL
    SELECT r.ctid FROM ripple_runs r
    WHERE r.workflow = ANY($1::text[]) AND r.status = 'pending' AND r.fairness_key IS NOT NULL
      AND r.available_at = 'infinity' AND r.concurrency_key IS NOT NULL))
  AND status = 'pending' AND fairness_key IS NOT NULL
"""

# $1 workflow names text[]: they declare no flow control (any more).
_DELETE_FLOW_CONTROLS: Final = "DELETE FROM ripple_flow_controls WHERE workflow = ANY($1::text[])"

# Claim due runs of the registered (workflow, version) pairs.
# $1 worker_id, $2 lease seconds, $3 limit, $4 distinct workflow names text[],
# $5 names text[], $6 versions int[] (parallel arrays: the pairs this worker serves),
# $7 alone bool: the claiming worker has nothing in flight.
# due: per served workflow, its due active runs in availability order from ripple_runs_claim
# (stopping after $3), skipping rows other claimers hold; urgent: the same from
# ripple_runs_priority for pending runs with priority > 0; cand: the $3 first of both, by
# priority then availability (FIFO within a priority).
# Suspects (migration 0016): a run that was `running` under an owner whose lease expired (the
# worker died or stalled), or one marked `suspect` since, may be what killed its worker. It
# is claimed alone, by a worker with nothing in flight ($7): isolated is the first suspect of
# cand when $7, and c is that suspect only, or else cand's other runs. A claim of a run lost
# while it was a suspect (it was alone: its own fault) counts one recovery, the crash budget
# the engine checks (apart from any step's attempts); a run lost beside others is not charged.
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
# The UPDATEs (taking, parking) match the locked candidates by `ctid` (`row_ref`): a TID scan
# whatever the planner estimates, so the generic plan the worker's claimer keeps does not turn
# into a join over ripple_runs with a backlog. A candidate another transaction updated between
# this statement's snapshot and its lock is not found by its new ctid: it is left for the
# next claim.
_CANDIDATES: Final = """
WITH due AS (
    SELECT x.*
    FROM unnest($4::text[]) AS n(workflow)
    CROSS JOIN LATERAL (
        SELECT r.ctid AS row_ref, r.run_id, r.workflow, r.status AS prev_status,
               r.lease_owner AS prev_owner,
               r.started_at IS NULL AS fresh, r.available_at, r.priority, r.concurrency_key,
               r.concurrency_limit, r.throttle_key, r.throttle_limit, r.throttle_period,
               r.suspect OR (r.status = 'running' AND r.lease_owner IS NOT NULL) AS suspect
        FROM ripple_runs r
        WHERE r.workflow = n.workflow
          AND r.status IN ('pending', 'running', 'sleeping', 'waiting')
          AND (r.fairness_key IS NULL OR r.status <> 'pending')
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
        SELECT r.ctid AS row_ref, r.run_id, r.workflow, r.status AS prev_status,
               r.lease_owner AS prev_owner,
               r.started_at IS NULL AS fresh, r.available_at, r.priority, r.concurrency_key,
               r.concurrency_limit, r.throttle_key, r.throttle_limit, r.throttle_period,
               r.suspect OR (r.status = 'running' AND r.lease_owner IS NOT NULL) AS suspect
        FROM ripple_runs r
        WHERE r.workflow = n.workflow
          AND r.status = 'pending' AND r.priority > 0 AND r.available_at < 'infinity'
          AND r.fairness_key IS NULL
          AND r.available_at <= now()
          AND (r.version IS NULL OR (r.workflow, r.version) IN
               (SELECT p.w, p.v FROM unnest($5::text[], $6::int[]) AS p(w, v)))
        ORDER BY r.priority DESC, r.available_at
        LIMIT $3
        FOR UPDATE OF r SKIP LOCKED
    ) AS x
), cand AS (
    SELECT u.* FROM (SELECT * FROM due UNION SELECT * FROM urgent) AS u
    ORDER BY u.priority DESC, u.available_at, u.run_id
    LIMIT $3
), isolated AS (
    SELECT cand.run_id FROM cand WHERE $7::bool AND cand.suspect
    ORDER BY cand.priority DESC, cand.available_at, cand.run_id
    LIMIT 1
), c AS (
    SELECT cand.* FROM cand
    WHERE CASE WHEN EXISTS (SELECT 1 FROM isolated)
               THEN cand.run_id = (SELECT i.run_id FROM isolated AS i)
               ELSE NOT cand.suspect END
"""

_FLOW_CONTROL: Final = """), t_rank AS (
    SELECT c.row_ref, c.run_id, c.workflow, c.throttle_key AS key,
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
    SELECT c2.row_ref, c2.run_id, c2.workflow, c2.concurrency_key AS key,
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
), park AS (
    -- the j-th run over a full window (j from 0) fits when the window's (j mod lim)-th
    -- start leaves it, (j div lim) periods later
    SELECT tr.row_ref, tr.run_id, 'throttle' AS reason,
           ts.starts[(tr.rk - ts.granted - 1) % ts.lim + 1]
           + ((tr.rk - ts.granted - 1) / ts.lim + 1) * ts.period * interval '1 second'
           AS until
    FROM t_rank tr JOIN t_slots ts ON ts.workflow = tr.workflow AND ts.key = tr.key
    WHERE tr.rk > ts.granted
    UNION ALL
    SELECT kr.row_ref, kr.run_id, 'concurrency', 'infinity'::timestamptz
    FROM k_rank kr JOIN k_slots ks ON ks.workflow = kr.workflow AND ks.key = kr.key
    WHERE kr.rk > ks.granted
), parked AS (
    UPDATE ripple_runs r SET available_at = p.until, blocked_by = p.reason, updated_at = now()
    FROM park AS p
    WHERE r.ctid = ANY(ARRAY(SELECT row_ref FROM park)) AND r.run_id = p.run_id
)
"""

_TAKE: Final = """UPDATE ripple_runs r
SET status = 'running',
    epoch = r.epoch + 1 + floor(random() * 4294967296)::bigint,
    lease_owner = $1,
    available_at = now() + $2 * interval '1 second',
    attempt = greatest(r.attempt, 1),
    recoveries = r.recoveries + CASE WHEN c.prev_status = 'running' AND c.prev_owner IS NOT NULL
                                           AND r.suspect THEN 1 ELSE 0 END,
    suspect = c.suspect,
    started_at = coalesce(r.started_at, now()),
    version = coalesce(r.version, (SELECT max(p.v) FROM unnest($5::text[], $6::int[]) AS p(w, v)
                                   WHERE p.w = r.workflow)),
    blocked_by = NULL,
    updated_at = now()
FROM {source} AS c
WHERE r.ctid = ANY(ARRAY(SELECT row_ref FROM {source})) AND r.run_id = c.run_id
RETURNING r.run_id, r.workflow, r.version, r.input, r.attempt, r.epoch, r.deadline, r.trace,
          r.step_count, r.created_at, r.parent_run_id, r.recoveries, c.prev_status,
          c.prev_owner, c.fresh, now() AS db_now, r.concurrency_key IS NOT NULL AS keyed,
          r.suspect, r.fairness_key
"""

_CLAIM_RUNS: Final = _CANDIDATES + _FLOW_CONTROL + _TAKE.format(source="ok")

# The claim of a worker serving fair workflows ($8: their names): `_CLAIM_RUNS` whose
# candidates also come from the workflows' fairness keys (stride scheduling, migration 0022).
# front: per fair workflow, the few active keys with the smallest pass (enough turns for $3
# runs, and two more), locked as the index walk finds them (SKIP LOCKED: concurrent claimers
# serve the next keys; a key's pass only moves under its lock). alloc: turns of FAIR_QUANTUM
# runs, ordered by their virtual finish time `pass + turn x FAIR_QUANTUM / weight`, say how
# many of the $3 runs each key gets. served: each allocated key's head runs in priority then
# FIFO order, that many, with their finish times, which rank them in cand after the runs
# resuming (due, urgent) of the same priority. A key's head is read once, by the descent that
# takes its runs: no probe first. A key that had fewer due runs than its turns (it ran dry,
# or its runs are due later) leaves `spare` turns: only then, refill takes them from the
# front's other keys, in the same statement. After the take, `_ADVANCE` settles the keys.
# Cost: a descent per key served, whatever the backlog and the number of keys.
#: Runs a key gets per turn at most: a claim of up to this many serves one key, and per-key
# work (a descent, a key row locked and written) is paid per turn, not per run. It is the
# worker's claim batch at concurrency 100, so a busy worker's claim serves one key.
FAIR_QUANTUM: Final = 10
_FAIR_RUN_FIELDS: Final = """r.ctid AS row_ref, r.run_id, r.workflow, r.status AS prev_status,
               r.lease_owner AS prev_owner,
               r.started_at IS NULL AS fresh, r.available_at, r.priority, r.concurrency_key,
               r.concurrency_limit, r.throttle_key, r.throttle_limit, r.throttle_period,
               r.suspect OR (r.status = 'running' AND r.lease_owner IS NOT NULL) AS suspect"""
_FAIR_DUE: Final = """r.workflow = {w} AND r.fairness_key = {k} AND r.status = 'pending'
                AND r.available_at < 'infinity' AND r.available_at <= now()
                AND (r.version IS NULL OR (r.workflow, r.version) IN
                     (SELECT p.w, p.v FROM unnest($5::text[], $6::int[]) AS p(w, v)))"""
#: Head runs of the keys of `alloc AS a` that pass {where}: {n} each, with their finish times.
_FAIR_HEADS: Final = f"""SELECT x.*, a.key AS fkey, a.pass + {{fin}} / a.weight AS fin
    FROM {{source}}
    CROSS JOIN LATERAL (
        SELECT {_FAIR_RUN_FIELDS}
        FROM ripple_runs r
        WHERE {_FAIR_DUE.format(w="a.workflow", k="a.key")}
        ORDER BY r.workflow, r.fairness_key, r.priority DESC, r.available_at
        LIMIT {{n}}
        FOR UPDATE OF r SKIP LOCKED
    ) AS x
    WHERE {{where}}"""  # noqa: S608
# cand: resumed runs (due, urgent) then the keys' runs, deduplicated by the sort (a run can be
# both due and urgent) rather than a UNION, whose hash table the generic plan sizes for
# thousands of rows.
_FAIR_CAND: Final = """), cand AS (
    SELECT DISTINCT ON (u.priority, u.fin, u.available_at, u.run_id) u.* FROM (
        SELECT v.*, NULL::text AS fkey, NULL::float8 AS fin FROM due AS v
        UNION ALL
        SELECT v.*, NULL::text AS fkey, NULL::float8 AS fin FROM urgent AS v
        UNION ALL
        SELECT * FROM served{refill}
    ) AS u
    ORDER BY u.priority DESC, u.fin NULLS FIRST, u.available_at, u.run_id
    LIMIT $3
), isolated AS ("""
_REFILLED: Final = """
        UNION ALL
        SELECT * FROM refill"""
#: Placeholder in `_FAIR_SERVED` for the keys the front takes beyond one per turn.
_SPARE_KEYS: Final = "/*spare keys*/"
_FAIR_SERVED: Final = f"""), front AS (
    SELECT f.workflow, f.key, f.pass, f.weight, f.touched
    FROM unnest($8::text[]) AS n(workflow)
    CROSS JOIN LATERAL unnest(ARRAY(
        SELECT k FROM ripple_fair_keys k
        WHERE k.workflow = n.workflow AND k.active
        ORDER BY k.workflow, k.pass, k.key
        LIMIT ($3 + {FAIR_QUANTUM - 1}) / {FAIR_QUANTUM}{_SPARE_KEYS}
        FOR UPDATE OF k SKIP LOCKED
    )) AS f
), alloc AS (
    SELECT s.workflow, s.key, s.pass, s.weight, s.touched,
           sum(least({FAIR_QUANTUM}, greatest(0, $3 - (s.turn - 1) * {FAIR_QUANTUM}))) AS n
    FROM (
        SELECT f.*, row_number() OVER (ORDER BY f.pass + t * {FAIR_QUANTUM}.0 / f.weight,
                                                f.workflow, f.key, t) AS turn
        FROM front AS f
        CROSS JOIN unnest(ARRAY(SELECT generate_series(1, ($3 + {FAIR_QUANTUM - 1}) / {
    FAIR_QUANTUM
})))
            AS t
    ) AS s
    GROUP BY s.workflow, s.key, s.pass, s.weight, s.touched
), served AS (
    {
    _FAIR_HEADS.format(
        source="alloc AS a",
        n="a.n",
        where="a.n > 0",
        fin="a.n",
    )
}
"""  # noqa: S608
_FAIR_CANDIDATES: Final = f"""{_FAIR_SERVED.replace(_SPARE_KEYS, " + 2")}), spare AS (
    SELECT $3 - count(*) AS n FROM served
), refill AS (
    {
    _FAIR_HEADS.format(
        source="spare AS s CROSS JOIN alloc AS a", n="s.n", where="s.n > 0 AND a.n = 0", fin="1"
    )
}
{_FAIR_CAND.format(refill=_REFILLED)}"""  # noqa: S608
# The worker's claim per batch (`_CLAIM_FAIR_QUICK`): no refill; a short claim that left a front
# key without runs is finished by `_CLAIM_FAIR_PLAIN`, which refills and settles.
_FAIR_QUICK_CANDIDATES: Final = _FAIR_SERVED.replace(_SPARE_KEYS, "") + _FAIR_CAND.format(refill="")

_PLAIN_CAND: Final = """), cand AS (
    SELECT u.* FROM (SELECT * FROM due UNION SELECT * FROM urgent) AS u
    ORDER BY u.priority DESC, u.available_at, u.run_id
    LIMIT $3
), isolated AS ("""

# moved: per key, the pending runs taken: its pass advances by them / its weight. A claim
# that got all the runs it allocated (no spare turns) found no key dry, and settles nothing.
# A short claim asked every front key for runs: settling takes the ones that had none due
# (dry). A dry key without any claimable pending run (empty) leaves the active keys, only if
# no transaction made one of its runs claimable since this statement's snapshot (`touched` on
# the locked newest row equals the snapshot's); one whose runs are due later (throttled,
# backing off) moves behind the front (the front's largest pass and a turn), so keys waiting
# for time never hold it, even when all passes are equal. advanced: one UPDATE writes each
# key's row once (moved and dry keys are disjoint). It finds the rows by key, not ctid (the
# locked row may be newer than the snapshot's, and the UPDATE follows it), through arrays of
# keys: joined to them, the generic plan read every key's row.
_ADVANCE: Final = f""", taken AS (
{{take}}), moved AS (
    SELECT t.workflow, t.fairness_key AS key, count(*) AS n, NULL::bool AS empty
    FROM taken AS t
    WHERE t.fairness_key IS NOT NULL AND t.prev_status = 'pending'
    GROUP BY t.workflow, t.fairness_key
), settling AS (
    SELECT a.workflow, a.key, 0::bigint AS n,
           h.found IS NULL
           AND a.touched = (SELECT o.touched FROM ripple_fair_keys o
                            WHERE o.workflow = a.workflow AND o.key = a.key) AS empty
    FROM spare AS s
    CROSS JOIN alloc AS a
    LEFT JOIN LATERAL (
        SELECT true AS found FROM ripple_runs r
        WHERE r.workflow = a.workflow AND r.fairness_key = a.key
          AND r.status = 'pending' AND r.available_at < 'infinity'
        ORDER BY r.workflow, r.fairness_key, r.priority DESC, r.available_at
        LIMIT 1
    ) AS h ON true
    WHERE s.n > 0
      AND (a.workflow, a.key) NOT IN (SELECT x.workflow, x.fkey FROM served AS x
                                      UNION ALL
                                      SELECT x.workflow, x.fkey FROM refill AS x)
), keyed AS (
    SELECT * FROM moved UNION ALL SELECT * FROM settling
), advanced AS (
    UPDATE ripple_fair_keys k
    SET pass = CASE WHEN s.empty IS NULL THEN k.pass + s.n / k.weight
                    WHEN s.empty THEN k.pass
                    ELSE greatest(k.pass, (SELECT max(f.pass) FROM front AS f))
                         + {FAIR_QUANTUM} / k.weight END,
        active = s.empty IS NOT TRUE
    FROM keyed AS s
    WHERE k.workflow = ANY(ARRAY(SELECT s.workflow FROM keyed AS s))
      AND k.key = ANY(ARRAY(SELECT s.key FROM keyed AS s))
      AND k.workflow = s.workflow AND k.key = s.key
)
{{select}}"""  # noqa: S608

# The quick claim's tail: moved as in `_ADVANCE`, without settling (the quick claim reports a
# short claim instead, see `_CLAIM_FAIR_QUICK`).
_MOVE: Final = """, taken AS (
{take}), moved AS (
    SELECT t.workflow, t.fairness_key AS key, count(*) AS n
    FROM taken AS t
    WHERE t.fairness_key IS NOT NULL AND t.prev_status = 'pending'
    GROUP BY t.workflow, t.fairness_key
), advanced AS (
    UPDATE ripple_fair_keys k
    SET pass = k.pass + s.n / k.weight
    FROM moved AS s
    WHERE k.workflow = ANY(ARRAY(SELECT s.workflow FROM moved AS s))
      AND k.key = ANY(ARRAY(SELECT s.key FROM moved AS s))
      AND k.workflow = s.workflow AND k.key = s.key
)
{select}"""

assert _PLAIN_CAND in _CANDIDATES
_CLAIM_FAIR: Final = (
    _CANDIDATES.replace(_PLAIN_CAND, _FAIR_CANDIDATES)
    + _FLOW_CONTROL
    + _ADVANCE.format(take=_TAKE.format(source="ok"), select="SELECT * FROM taken\n")
)

#: Whether flow control decides about candidate `c` (else it passes it untouched).
_GOVERNED: Final = """(c.throttle_key IS NOT NULL AND c.fresh AND c.prev_status = 'pending')
        OR (c.concurrency_key IS NOT NULL AND c.prev_status = 'pending')"""
_TAKE_PLAIN: Final = _TAKE.format(source="plain")
# The claim without flow control, tried first (`claim_runs_plain`): the CTEs above cost about
# a quarter of a millisecond of planning and execution per claim even when no candidate has a
# key. It takes the candidates flow control would pass untouched and reports in `governed`
# whether it left any that flow control must decide; the caller then claims those with
# _CLAIM_RUNS. The first row has a NULL run_id when nothing was taken. `suspect_waiting`: a
# claim that was not alone ($7 false) passed over a due suspect. Composed of this module's
# constants only (no input reaches the text).
_CLAIM_PLAIN: Final = f"""{_CANDIDATES}), plain AS (
    SELECT c.* FROM c WHERE NOT ({_GOVERNED})
), taken AS (
{_TAKE_PLAIN})
SELECT t.*, g.governed, g.suspect_waiting
FROM (SELECT EXISTS (SELECT 1 FROM c WHERE {_GOVERNED}) AS governed,
             NOT $7::bool AND EXISTS (SELECT 1 FROM cand WHERE cand.suspect) AS suspect_waiting
     ) AS g
LEFT JOIN taken AS t ON true
"""  # noqa: S608

# The fair claim without flow control, tried first (`claim_runs_plain` with `fair`), as
# `_CLAIM_PLAIN` is for `_CLAIM_RUNS`: a fair workflow without concurrency or throttle never
# pays for their CTEs.
_FAIR_PLAIN_SELECT: Final = f"""SELECT t.*, g.governed, g.suspect_waiting
FROM (SELECT EXISTS (SELECT 1 FROM c WHERE {_GOVERNED}) AS governed,
             NOT $7::bool AND EXISTS (SELECT 1 FROM cand WHERE cand.suspect) AS suspect_waiting
     ) AS g
LEFT JOIN taken AS t ON true
"""  # noqa: S608
_FAIR_PLAIN_CTE: Final = f"""), plain AS (
    SELECT c.* FROM c WHERE NOT ({_GOVERNED})
)"""  # noqa: S608
_CLAIM_FAIR_PLAIN: Final = (
    _CANDIDATES.replace(_PLAIN_CAND, _FAIR_CANDIDATES)
    + _FAIR_PLAIN_CTE
    + _ADVANCE.format(take=_TAKE_PLAIN, select=_FAIR_PLAIN_SELECT)
)

# The worker's fair claim per batch (`claim_runs_plain` with `fair`): `_CLAIM_FAIR_PLAIN` without
# refill and settling, whose plan nodes every execution paid for although only a short claim
# runs them. `short`: fewer runs came from the keys than asked and a front key gave none (dry,
# or its runs are due later); the caller then claims the rest with `_CLAIM_FAIR_PLAIN`, which
# refills from the other front keys and settles the dry ones.
_FAIR_QUICK_SELECT: Final = f"""SELECT t.*, g.governed, g.suspect_waiting, g.short
FROM (SELECT EXISTS (SELECT 1 FROM c WHERE {_GOVERNED}) AS governed,
             NOT $7::bool AND EXISTS (SELECT 1 FROM cand WHERE cand.suspect) AS suspect_waiting,
             (SELECT count(*) FROM served) < $3 AND EXISTS (SELECT 1 FROM front) AS short
     ) AS g
LEFT JOIN taken AS t ON true
"""  # noqa: S608
_CLAIM_FAIR_QUICK: Final = (
    _CANDIDATES.replace(_PLAIN_CAND, _FAIR_QUICK_CANDIDATES)
    + _FAIR_PLAIN_CTE
    + _MOVE.format(take=_TAKE_PLAIN, select=_FAIR_QUICK_SELECT)
)

# $1 distinct workflow names text[], $2 names text[], $3 versions int[] (the served pairs):
# seconds until the next run this worker may claim becomes available (NULL: none; negative:
# due but held by another claimer). One index probe per served workflow, and one more for the
# pending runs of its fairness keys.
_NEXT_DUE: Final = """
SELECT extract(epoch FROM min(x.available_at) - clock_timestamp())::float8
FROM unnest($1::text[]) AS n(workflow)
CROSS JOIN LATERAL (
    (SELECT r.available_at FROM ripple_runs r
     WHERE r.workflow = n.workflow
       AND r.status IN ('pending', 'running', 'sleeping', 'waiting')
       AND (r.fairness_key IS NULL OR r.status <> 'pending')
       AND r.available_at < 'infinity'
       AND (r.version IS NULL OR (r.workflow, r.version) IN
            (SELECT p.w, p.v FROM unnest($2::text[], $3::int[]) AS p(w, v)))
     ORDER BY r.available_at
     LIMIT 1)
    UNION ALL
    (SELECT r.available_at FROM ripple_runs r
     WHERE r.workflow = n.workflow
       AND r.status = 'pending' AND r.fairness_key IS NOT NULL AND r.available_at < 'infinity'
       AND (r.version IS NULL OR (r.workflow, r.version) IN
            (SELECT p.w, p.v FROM unnest($2::text[], $3::int[]) AS p(w, v)))
     ORDER BY r.available_at
     LIMIT 1)
) AS x
"""

# Worker registry. $1 worker_id, $2 hostname, $3 pid, $4 serves
_REGISTER_WORKER: Final = """
INSERT INTO ripple_workers (worker_id, hostname, pid, serves) VALUES ($1, $2, $3, $4)
ON CONFLICT (worker_id) DO UPDATE SET serves = excluded.serves, heartbeat_at = now()
"""

# $1 worker_id
_HEARTBEAT_WORKER: Final = "UPDATE ripple_workers SET heartbeat_at = now() WHERE worker_id = $1"

# $1 worker_id
_DELETE_WORKER: Final = "DELETE FROM ripple_workers WHERE worker_id = $1"


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
    #: claimed in isolation: it may have killed its last worker (see `claim_runs`)
    suspect: bool = False

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
            suspect=row["suspect"],
        )


class PlainClaim(NamedTuple):
    """What `claim_runs_plain` claimed and found."""

    #: the runs claimed
    runs: list[ClaimedRun]
    #: candidates flow control must decide were found (and claimed with it)
    governed: bool
    #: the claim was not alone and passed over a due suspect (it waits for an idle worker)
    suspect_waiting: bool


async def claim_runs(
    conn: Executor,
    *,
    worker_id: str,
    lease: float,
    limit: int,
    pairs: Sequence[tuple[str, int]],
    alone: bool = True,
    fair: Sequence[str] = (),
) -> list[ClaimedRun]:
    """Claim up to `limit` due runs of the given (workflow, version) pairs. A suspect (a run
    whose worker was lost) is claimed only by a claim made `alone` (nothing in flight on the
    claiming worker), and then it is the only run claimed. The pending runs of the fair
    workflows among them (`fair`: their names) are claimed in a weighted round robin across
    fairness keys, in the same statement as the other runs and under the same flow control."""
    statement, _ = _statements(fair)
    rows = await conn.fetch(statement, *_claim_args(worker_id, lease, limit, pairs, alone, fair))
    return [ClaimedRun.from_row(row) for row in rows]


async def claim_runs_plain(
    conn: Executor,
    *,
    worker_id: str,
    lease: float,
    limit: int,
    pairs: Sequence[tuple[str, int]],
    alone: bool = True,
    fair: Sequence[str] = (),
) -> PlainClaim:
    """`claim_runs` that tries the claim without flow control first: the claimed runs,
    whether flow control was needed (candidates it must decide were found, and claimed with
    it by a second statement), and whether a suspect waits for a claim made alone. A fair
    claim is one statement per batch unless its keys came up short (`_CLAIM_FAIR_QUICK`)."""
    full, plain = _statements(fair)
    args = _claim_args(worker_id, lease, limit, pairs, alone, fair)
    rows = await conn.fetch(_CLAIM_FAIR_QUICK if fair else plain, *args)
    claimed = [ClaimedRun.from_row(row) for row in rows if row["run_id"] is not None]
    governed: bool = rows[0]["governed"]
    waiting: bool = rows[0]["suspect_waiting"]
    if fair and not governed and rows[0]["short"] and len(claimed) < limit:
        # The rare path: active keys gave fewer runs than asked (some ran dry, or their runs
        # are due later). The fair claim with refill takes the rest from the front's other
        # keys and settles the dry ones. Alone no more once runs were taken (as below).
        alone = alone and not claimed
        rows = await conn.fetch(
            plain, *_claim_args(worker_id, lease, limit - len(claimed), pairs, alone, fair)
        )
        claimed += [ClaimedRun.from_row(row) for row in rows if row["run_id"] is not None]
        governed = rows[0]["governed"]
        waiting = waiting or rows[0]["suspect_waiting"]
    if governed and len(claimed) < limit:
        # Alone no more once this claim took runs: a suspect must not join them.
        alone = alone and not claimed
        rest = await conn.fetch(
            full, *_claim_args(worker_id, lease, limit - len(claimed), pairs, alone, fair)
        )
        claimed += [ClaimedRun.from_row(row) for row in rest]
    return PlainClaim(claimed, governed, waiting)


def _statements(fair: Sequence[str]) -> tuple[str, str]:
    """The claim with flow control and the one without, fair when `fair` names workflows."""
    return (_CLAIM_FAIR, _CLAIM_FAIR_PLAIN) if fair else (_CLAIM_RUNS, _CLAIM_PLAIN)


def _claim_args(
    worker_id: str,
    lease: float,
    limit: int,
    pairs: Sequence[tuple[str, int]],
    alone: bool,
    fair: Sequence[str],
) -> tuple[Any, ...]:
    args = (worker_id, lease, limit, *_pair_args(pairs), alone)
    return (*args, sorted(set(fair))) if fair else args


def _pair_args(pairs: Sequence[tuple[str, int]]) -> tuple[list[str], list[str], list[int]]:
    """The served (workflow, version) pairs as the claim statements take them: the distinct
    names, then names and versions as parallel arrays."""
    names = [p[0] for p in pairs]
    return sorted(set(names)), names, [p[1] for p in pairs]


async def next_due(conn: Executor, *, pairs: Sequence[tuple[str, int]]) -> float | None:
    """Seconds until the next run this worker may claim is due (None: none is scheduled)."""
    value: float | None = await conn.fetchval(_NEXT_DUE, *_pair_args(pairs))
    return value


async def sync_flow_controls(
    conn: Executor, *, rows: Sequence[tuple[str, tuple[Any, ...] | None]]
) -> None:
    """Store the flow-control options of workflows: `rows` are (name, options-or-None), the
    options as `flow.flow_control_row` gives them."""
    gone = [row[0] for row in rows if row[1] is None]
    for name, options in rows:
        if options is not None:
            await conn.execute(_UPSERT_FLOW_CONTROL, name, *options)
    if gone:
        await conn.execute(_DELETE_FLOW_CONTROLS, gone)
    # flow_control_row's 9th value: whether the workflow is fair
    unfair = [name for name, options in rows if options is None or not options[8]]
    if unfair:
        await conn.execute(_UNFAIR_RUNS, unfair)


async def register_worker(
    conn: Executor, *, worker_id: str, hostname: str, pid: int, serves: list[dict[str, Any]]
) -> None:
    await conn.execute(_REGISTER_WORKER, worker_id, hostname, pid, serves)


async def heartbeat_worker(conn: Executor, *, worker_id: str) -> None:
    await conn.execute(_HEARTBEAT_WORKER, worker_id)


async def delete_worker(conn: Executor, *, worker_id: str) -> None:
    await conn.execute(_DELETE_WORKER, worker_id)
