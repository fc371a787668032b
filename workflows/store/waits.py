"""Waits, signals and signal idempotency keys: registering and resolving a run's waits (by
signal, by event, on timeout), its signal inbox, and dropping waits of ended branches and runs.
SQL private to this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple

from ripple.workflows.store.rows import Executor

__all__ = [
    "BufferedSignal",
    "claim_signal_key",
    "consume_signal",
    "delete_run_waits",
    "delete_wait",
    "delete_waits_of",
    "delete_waits_under",
    "insert_wait",
    "lock_event_wait_runs",
    "matching_wait_runs",
    "read_signal_key_result",
    "record_signal_key",
    "resolve_event_waits",
    "signal_run",
]

# A race was decided: drop the waits of the losing branches (a later signal is not delivered to
# them). Runs after the fence. $1 run_id, $2 key prefixes of the losing branches text[]
_DELETE_WAITS_UNDER: Final = """
DELETE FROM ripple_waits w USING unnest($2::text[]) AS t(prefix)
WHERE w.run_id = $1 AND left(w.step_key, length(t.prefix)) = t.prefix
"""

# Inbox: the earliest buffered signal `name` of the run whose payload contains `match`.
# $1 run_id, $2 name, $3 match|NULL
_CONSUME_SIGNAL: Final = """
DELETE FROM ripple_signals WHERE id = (
    SELECT id FROM ripple_signals
    WHERE run_id = $1 AND name = $2 AND ($3::jsonb IS NULL OR payload @> $3::jsonb)
    ORDER BY id LIMIT 1 FOR UPDATE
) RETURNING payload
"""

# $1 run_id, $2 step_key, $3 step_seq, $4 name, $5 event, $6 match, $7 expires_at
_INSERT_WAIT: Final = """
INSERT INTO ripple_waits (run_id, step_key, step_seq, name, event, match, expires_at)
VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING
"""

# $1 run_id, $2 step_key
_DELETE_WAIT: Final = "DELETE FROM ripple_waits WHERE run_id = $1 AND step_key = $2 RETURNING 1"

# $1 run_id
_DELETE_RUN_WAITS: Final = "DELETE FROM ripple_waits WHERE run_id = $1"

# Signal to one run, after `lock_run` (so a run suspending at this moment sees the outcome):
# resolve its earliest wait `name` whose match the payload contains, journaling the payload as
# that wait's result and making the run available; else keep the signal in the run's inbox.
# Returns whether a wait was resolved. $1 run_id, $2 name, $3 payload
_SIGNAL_RUN: Final = """
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
_CLAIM_SIGNAL_KEY: Final = """
INSERT INTO ripple_signal_keys (scope, idempotency_key) VALUES ($1, $2)
ON CONFLICT DO NOTHING RETURNING 1
"""

# The first call's answer, for a repeat. $1 scope, $2 key
_SELECT_SIGNAL_KEY: Final = """
SELECT result FROM ripple_signal_keys WHERE scope = $1 AND idempotency_key = $2
"""

# Record the first call's answer, in its transaction. $1 scope, $2 key, $3 result jsonb
_RECORD_SIGNAL_KEY: Final = """
UPDATE ripple_signal_keys SET result = $3 WHERE scope = $1 AND idempotency_key = $2
"""

# Event waits: lock the runs with a candidate wait first (ordered, so publishers never
# deadlock), so a run that is suspending sees the resolution. $1 event, $2 payload
_LOCK_EVENT_WAIT_RUNS: Final = """
SELECT r.run_id FROM ripple_runs r
WHERE r.run_id IN (
    SELECT w.run_id FROM ripple_waits w
    WHERE w.event = $1 AND (w.match IS NULL OR $2::jsonb @> w.match)
)
ORDER BY r.run_id
FOR UPDATE OF r
"""

# Resolve every wait on `event` whose match the payload contains, of the runs _LOCK_EVENT_WAIT_RUNS
# locked, journal the payload as the wait step's result, and make those runs available. Only
# locked runs: a wait registered after that lock's snapshot belongs to a run that may be
# suspending unseen (it would miss its wake-up); it waits for the next matching event.
# $1 event, $2 payload, $3 locked run ids
_RESOLVE_EVENT_WAITS: Final = """
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

# $1 run ids text[]
_DELETE_WAITS_OF: Final = "DELETE FROM ripple_waits WHERE run_id = ANY($1::text[])"

# $1 topic, $2 payload: runs whose workflow waits an event would resolve (read-only, for
# explain)
_SELECT_MATCHING_WAIT_RUNS: Final = """
SELECT DISTINCT run_id FROM ripple_waits
WHERE event = $1 AND (match IS NULL OR $2::jsonb @> match)
ORDER BY run_id
"""


class BufferedSignal(NamedTuple):
    """A signal taken from a run's inbox."""

    payload: Any


async def consume_signal(
    conn: Executor, *, run_id: str, name: str, match: Any
) -> BufferedSignal | None:
    """Take the run's earliest buffered signal `name` whose payload contains `match`."""
    row = await conn.fetchrow(_CONSUME_SIGNAL, run_id, name, match)
    return None if row is None else BufferedSignal(row[0])


async def insert_wait(
    conn: Executor,
    *,
    run_id: str,
    step_key: str,
    step_seq: int,
    name: str,
    event: str | None,
    match: Any,
    expires_at: datetime | None,
) -> None:
    await conn.execute(_INSERT_WAIT, run_id, step_key, step_seq, name, event, match, expires_at)


async def delete_wait(conn: Executor, *, run_id: str, step_key: str) -> bool:
    """Drop a wait (it timed out); False if it was resolved first."""
    return await conn.fetchval(_DELETE_WAIT, run_id, step_key) is not None


async def delete_run_waits(conn: Executor, *, run_id: str) -> None:
    await conn.execute(_DELETE_RUN_WAITS, run_id)


async def delete_waits_of(conn: Executor, *, run_ids: Sequence[str]) -> None:
    await conn.execute(_DELETE_WAITS_OF, list(run_ids))


async def delete_waits_under(conn: Executor, *, run_id: str, prefixes: Sequence[str]) -> None:
    """Drop the waits of a race's losing branches (step key prefixes), after the fence."""
    await conn.execute(_DELETE_WAITS_UNDER, run_id, list(prefixes))


async def signal_run(conn: Executor, *, run_id: str, name: str, payload: Any) -> bool:
    """Resolve the run's earliest matching wait `name` (after `lock_run`), else buffer the
    signal in its inbox; whether a wait was resolved."""
    return bool(await conn.fetchval(_SIGNAL_RUN, run_id, name, payload))


async def claim_signal_key(conn: Executor, *, scope: str, key: str) -> bool:
    """Take a signal idempotency key first in the signal's transaction; False if an earlier
    call holds it (a concurrent one waits here for that call's commit)."""
    return await conn.fetchval(_CLAIM_SIGNAL_KEY, scope, key) is not None


async def read_signal_key_result(conn: Executor, *, scope: str, key: str) -> dict[str, Any] | None:
    """The first call's recorded answer for a repeated key."""
    result: dict[str, Any] | None = await conn.fetchval(_SELECT_SIGNAL_KEY, scope, key)
    return result


async def record_signal_key(
    conn: Executor, *, scope: str, key: str, result: dict[str, Any]
) -> None:
    await conn.execute(_RECORD_SIGNAL_KEY, scope, key, result)


async def lock_event_wait_runs(conn: Executor, *, event: str, payload: Any) -> list[str]:
    """Lock (in id order) the runs with a wait `payload` may resolve; their ids."""
    return [row[0] for row in await conn.fetch(_LOCK_EVENT_WAIT_RUNS, event, payload)]


async def resolve_event_waits(
    conn: Executor, *, event: str, payload: Any, run_ids: list[str]
) -> int:
    """Resolve the matching waits of the locked `run_ids`; how many."""
    count: int = await conn.fetchval(_RESOLVE_EVENT_WAITS, event, payload, run_ids)
    return count


async def matching_wait_runs(conn: Executor, *, event: str, payload: Any) -> list[str]:
    """Runs with a wait an event `event` with `payload` would resolve (read-only: explain)."""
    return [row[0] for row in await conn.fetch(_SELECT_MATCHING_WAIT_RUNS, event, payload)]
