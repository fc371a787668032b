"""Retention and statistics of the workflow tables: `RunUpkeep` implements the foundation's
`RunRetention` and `RunStats` ports (platform/ops/ports.py), so the sweeper, the gauges, the API and
the dashboard reach runs through it. SQL private to this module.

Retention deletes only terminal runs (the status test is re-checked under the row lock), never
one with `hold` set; each statement deletes at most one batch (`FOR UPDATE SKIP LOCKED`) and
reports what it deleted.
"""

from __future__ import annotations

from typing import Final

from ripple.platform.core.db import Connection
from ripple.platform.ops.ports import StrandedGauge
from ripple.workflows.store.rows import command_count

__all__ = ["RunUpkeep"]

# $1 server maximum retention in seconds (clamps each run's snapshot), $2 batch size (runs),
# $3 default retention in seconds (runs without a snapshot), $4 journal budget (step rows).
# candidates: the oldest terminal, unheld runs past their retention, locked (busy rows skipped);
# doomed: a prefix of them whose journals (estimated by step_count) fit the budget, at least one,
# so a batch of long runs stays bounded too; then their journal, waits and unconsumed signals,
# their search attributes and approvals, and the runs themselves, in one statement.
# Candidates left out are unlocked at commit.
_DELETE_EXPIRED_RUNS: Final = """
WITH candidates AS (
    SELECT run_id, completed_at, step_count FROM ripple_runs
    WHERE status IN ('completed', 'failed', 'canceled')
      AND NOT hold
      AND completed_at < now() - make_interval(secs => least(coalesce(retention_seconds, $3), $1))
    ORDER BY completed_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), doomed AS (
    SELECT run_id FROM (
        SELECT run_id,
               row_number() OVER w AS n,
               sum(greatest(step_count, 1)) OVER w AS journal
        FROM candidates
        WINDOW w AS (ORDER BY completed_at, run_id)
    ) AS c
    WHERE n = 1 OR journal <= $4
), steps AS (
    DELETE FROM ripple_steps s USING doomed d WHERE s.run_id = d.run_id RETURNING 1
), waits AS (
    DELETE FROM ripple_waits w USING doomed d WHERE w.run_id = d.run_id RETURNING 1
), signals AS (
    DELETE FROM ripple_signals g USING doomed d WHERE g.run_id = d.run_id RETURNING 1
), attributes AS (
    DELETE FROM ripple_run_attributes a USING doomed d WHERE a.run_id = d.run_id RETURNING 1
), approvals AS (
    DELETE FROM ripple_approvals p USING doomed d WHERE p.run_id = d.run_id RETURNING 1
), runs AS (
    DELETE FROM ripple_runs r USING doomed d WHERE r.run_id = d.run_id RETURNING 1
)
SELECT (SELECT count(*) FROM candidates) AS candidates,
       (SELECT count(*) FROM runs) AS runs,
       (SELECT count(*) FROM steps) AS steps,
       (SELECT count(*) FROM waits) AS waits,
       (SELECT count(*) FROM signals) AS signals
"""

# $1 retention in seconds, $2 batch size. Signal idempotency keys expire with events.
_DELETE_OLD_SIGNAL_KEYS: Final = """
WITH doomed AS (
    SELECT scope, idempotency_key FROM ripple_signal_keys
    WHERE created_at < now() - make_interval(secs => $1)
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM ripple_signal_keys k USING doomed d
WHERE k.scope = d.scope AND k.idempotency_key = d.idempotency_key
"""

# $1 run id, $2 hold (true exempts the run from retention).
_SET_HOLD: Final = "UPDATE ripple_runs SET hold = $2 WHERE run_id = $1"

#: Seconds of minutes the run count rollup keeps (the triggers of migration 0017 count the
#: runs of the last two days; the dashboard reads one).
RUN_COUNTS_KEPT: Final = 2 * 86_400.0

# $1 most change rows, $2 seconds kept. Folds one batch of run count changes (appended by the
# triggers of migration 0017; a change takes `n` from its left status and gives them to its
# entered one) into ripple_run_counts, upserting in key order, and drops counts of minutes
# older than $2. Returns the change rows folded.
_FOLD_RUN_COUNTS: Final = """
WITH moved AS (
    DELETE FROM ripple_run_count_changes
    WHERE ctid = ANY(ARRAY(SELECT ctid FROM ripple_run_count_changes LIMIT $1))
    RETURNING minute, workflow, left_status, entered_status, n
),
deltas AS (
    SELECT minute, workflow, entered_status AS status, n FROM moved
    WHERE entered_status IS NOT NULL
    UNION ALL
    SELECT minute, workflow, left_status, -n FROM moved WHERE left_status IS NOT NULL
),
folded AS (
    INSERT INTO ripple_run_counts AS c (minute, workflow, status, n)
    SELECT minute, workflow, status, sum(n) FROM deltas
    WHERE minute >= now() - make_interval(secs => $2)
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
    ON CONFLICT (minute, workflow, status) DO UPDATE SET n = c.n + EXCLUDED.n
),
pruned AS (
    DELETE FROM ripple_run_counts WHERE minute < now() - make_interval(secs => $2)
)
SELECT count(*) FROM moved
"""
# $1 lock key. Folds are serialised (a second one skips): two would only wait on each
# other's rows.
_TRY_FOLD_LOCK: Final = "SELECT pg_try_advisory_xact_lock($1)"
#: "runcount" in ASCII, shared by every Ripple process.
_FOLD_LOCK_KEY: Final = 0x72756E636F756E74

# $1 liveness window in seconds (a worker is live while its heartbeat is younger).
# live: every (workflow, version) some live worker serves.
# Active runs (not terminal) whose workflow no live worker serves at their pinned version; a run
# whose version is not pinned yet (NULL) is stranded only if no live worker serves the workflow
# at any version.
_SELECT_STRANDED_RUNS: Final = """
WITH live AS (
    SELECT DISTINCT s ->> 'workflow' AS workflow, (s ->> 'version')::int AS version
    FROM ripple_workers w
    CROSS JOIN LATERAL jsonb_array_elements(w.serves) AS s
    WHERE w.heartbeat_at > now() - make_interval(secs => $1)
)
SELECT r.workflow, r.version, count(*) AS runs
FROM ripple_runs r
WHERE r.status IN ('pending', 'running', 'sleeping', 'waiting')
  AND NOT EXISTS (
      SELECT 1 FROM live l
      WHERE l.workflow = r.workflow AND (r.version IS NULL OR l.version = r.version)
  )
GROUP BY r.workflow, r.version
"""

# no parameters (a scan of the runs table: retention keeps it bounded; an operator route and a
# gauge, not a hot path)
_COUNT_RUNS_BY_WORKFLOW: Final = """
SELECT workflow, status, count(*) AS n
FROM ripple_runs
GROUP BY workflow, status
ORDER BY workflow, status
"""


class RunUpkeep:
    """The workflow store's side of the retention and statistics ports (stateless)."""

    async def delete_expired_runs(
        self,
        conn: Connection,
        *,
        max_retention: float,
        default_retention: float,
        batch: int,
        journal_budget: int,
    ) -> tuple[dict[str, int], bool]:
        row = await conn.fetchrow(
            _DELETE_EXPIRED_RUNS, max_retention, batch, default_retention, journal_budget
        )
        assert row is not None
        counts = {kind: int(row[kind]) for kind in ("runs", "steps", "waits", "signals")}
        candidates = int(row["candidates"])
        return counts, candidates >= batch or counts["runs"] < candidates

    async def delete_old_signal_keys(
        self, conn: Connection, *, retention: float, batch: int
    ) -> int:
        return command_count(await conn.execute(_DELETE_OLD_SIGNAL_KEYS, retention, batch))

    async def set_hold(self, conn: Connection, *, run_id: str, hold: bool) -> bool:
        return command_count(await conn.execute(_SET_HOLD, run_id, hold)) == 1

    async def fold_run_counts(self, conn: Connection, *, batch: int) -> tuple[int, bool]:
        if not await conn.fetchval(_TRY_FOLD_LOCK, _FOLD_LOCK_KEY):
            return 0, False
        folded = int(await conn.fetchval(_FOLD_RUN_COUNTS, batch, RUN_COUNTS_KEPT))
        return folded, folded >= batch

    async def count_runs(self, conn: Connection) -> dict[str, dict[str, int]]:
        counts: dict[str, dict[str, int]] = {}
        for row in await conn.fetch(_COUNT_RUNS_BY_WORKFLOW):
            counts.setdefault(row["workflow"], {})[row["status"]] = int(row["n"])
        return counts

    async def count_stranded_runs(
        self, conn: Connection, *, live_seconds: float
    ) -> list[StrandedGauge]:
        rows = await conn.fetch(_SELECT_STRANDED_RUNS, live_seconds)
        return [StrandedGauge(row["workflow"], row["version"], int(row["runs"])) for row in rows]
