"""SQL of the retention sweeper: bounded, `SKIP LOCKED` batch deletes, and the run `hold` flag.

Each statement deletes at most one batch and reports what it deleted; the sweeper loops. Only
terminal runs are ever deleted (the status test is re-checked under the row lock), never one
with `hold` set.
"""

from __future__ import annotations

from typing import Final

from ripple.platform.db import Connection

__all__ = [
    "delete_expired_runs",
    "delete_old_events",
    "delete_old_signal_keys",
    "delete_old_webhook_attempts",
    "delete_old_webhook_deliveries",
    "set_hold",
]

# $1 server maximum retention in seconds (clamps each run's snapshot), $2 batch size (runs),
# $3 default retention in seconds (runs without a snapshot), $4 journal budget (step rows).
# candidates: the oldest terminal, unheld runs past their retention, locked (busy rows skipped);
# doomed: a prefix of them whose journals (estimated by step_count) fit the budget, at least one,
# so a batch of long runs stays bounded too; then their journal, waits and unconsumed signals,
# and the runs themselves, in one statement. Candidates left out are unlocked at commit.
DELETE_EXPIRED_RUNS: Final = """
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
), runs AS (
    DELETE FROM ripple_runs r USING doomed d WHERE r.run_id = d.run_id RETURNING 1
)
SELECT (SELECT count(*) FROM candidates) AS candidates,
       (SELECT count(*) FROM runs) AS runs,
       (SELECT count(*) FROM steps) AS steps,
       (SELECT count(*) FROM waits) AS waits,
       (SELECT count(*) FROM signals) AS signals
"""

# $1 event retention in seconds, $2 batch size. Oldest events first.
DELETE_OLD_EVENTS: Final = """
WITH doomed AS (
    SELECT id FROM ripple_events
    WHERE created_at < now() - make_interval(secs => $1)
    ORDER BY created_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM ripple_events e USING doomed d WHERE e.id = d.id
"""

# $1 retention in seconds, $2 batch size. Signal idempotency keys expire with events.
DELETE_OLD_SIGNAL_KEYS: Final = """
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

# $1 retention in seconds, $2 batch size.
# doomed: delivered or failed (dead-lettered) deliveries last changed before the cutoff; their
# attempt log goes with them (deleted explicitly, so it is counted).
DELETE_OLD_WEBHOOK_DELIVERIES: Final = """
WITH doomed AS (
    SELECT id FROM ripple_webhook_deliveries
    WHERE status IN ('delivered', 'failed')
      AND updated_at < now() - make_interval(secs => $1)
    ORDER BY updated_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), attempts AS (
    DELETE FROM ripple_webhook_attempts a USING doomed d WHERE a.delivery_id = d.id RETURNING 1
), deliveries AS (
    DELETE FROM ripple_webhook_deliveries w USING doomed d WHERE w.id = d.id RETURNING 1
)
SELECT (SELECT count(*) FROM deliveries) AS deliveries,
       (SELECT count(*) FROM attempts) AS attempts
"""

# $1 retention in seconds, $2 batch size. Attempt log rows older than the cutoff, also of
# deliveries still pending (a delivery retried for longer than the retention keeps its recent
# attempts only).
DELETE_OLD_WEBHOOK_ATTEMPTS: Final = """
WITH doomed AS (
    SELECT id FROM ripple_webhook_attempts
    WHERE started_at < now() - make_interval(secs => $1)
    ORDER BY started_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
DELETE FROM ripple_webhook_attempts a USING doomed d WHERE a.id = d.id
"""

# $1 run id, $2 hold (true exempts the run from retention).
SET_HOLD: Final = "UPDATE ripple_runs SET hold = $2 WHERE run_id = $1"


def _count(status: str) -> int:
    """Rows affected, from a command tag such as `DELETE 500`."""
    return int(status.rsplit(" ", 1)[-1])


async def delete_expired_runs(
    conn: Connection,
    max_retention: float,
    batch: int,
    default_retention: float,
    journal_budget: int,
) -> tuple[dict[str, int], bool]:
    """Delete one batch of expired runs with their steps, waits and signals.

    Returns rows deleted per kind, and whether more expired runs may be left (a full batch of
    candidates, or some left out by the journal budget).
    """
    row = await conn.fetchrow(
        DELETE_EXPIRED_RUNS, max_retention, batch, default_retention, journal_budget
    )
    assert row is not None
    counts = {kind: int(row[kind]) for kind in ("runs", "steps", "waits", "signals")}
    candidates = int(row["candidates"])
    return counts, candidates >= batch or counts["runs"] < candidates


async def delete_old_events(conn: Connection, retention: float, batch: int) -> int:
    return _count(await conn.execute(DELETE_OLD_EVENTS, retention, batch))


async def delete_old_signal_keys(conn: Connection, retention: float, batch: int) -> int:
    return _count(await conn.execute(DELETE_OLD_SIGNAL_KEYS, retention, batch))


async def delete_old_webhook_deliveries(
    conn: Connection, retention: float, batch: int
) -> dict[str, int]:
    row = await conn.fetchrow(DELETE_OLD_WEBHOOK_DELIVERIES, retention, batch)
    assert row is not None
    return {"webhook_deliveries": int(row["deliveries"]), "webhook_attempts": int(row["attempts"])}


async def delete_old_webhook_attempts(conn: Connection, retention: float, batch: int) -> int:
    return _count(await conn.execute(DELETE_OLD_WEBHOOK_ATTEMPTS, retention, batch))


async def set_hold(conn: Connection, run_id: str, hold: bool) -> bool:
    """Set or clear a run's hold; False if there is no such run."""
    return _count(await conn.execute(SET_HOLD, run_id, hold)) == 1
