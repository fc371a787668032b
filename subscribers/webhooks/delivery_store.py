"""Webhook delivery SQL and row mapping: fan-out inserts, claims, outcomes, listing, redrive.

Owns the statements on `ripple_webhook_deliveries`, `ripple_webhook_attempts` and
`ripple_webhook_health` (and the one update that disables a webhook subscription). Functions take
a `Connection` so callers compose one transaction; no HTTP and no policy decisions here.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import asyncpg

from ripple.platform.core.db import Connection
from ripple.platform.events import subscription_store
from ripple.subscribers.targets import DEFAULT_MAX_IN_FLIGHT

__all__ = [
    "Attempt",
    "Breaker",
    "Claim",
    "ClaimedDelivery",
    "Delivery",
    "DeliveryPage",
    "DeliveryStatus",
    "EndpointHealth",
    "FinishedAttempt",
    "claim_due",
    "close_circuit",
    "disable_subscription",
    "due_now",
    "endpoints",
    "fail_orphans",
    "finish_attempts",
    "finish_document",
    "get_delivery",
    "list_attempts",
    "list_deliveries",
    "redrive",
    "redrive_failed",
    "release_claims",
    "update_target",
    "webhook_target_for_update",
]


class DeliveryStatus:
    """Delivery statuses (the DB text)."""

    #: waiting for its next attempt (or being attempted under a claim)
    PENDING: Final = "pending"
    #: an attempt got a 2xx
    DELIVERED: Final = "delivered"
    #: dead letter: attempts exhausted or refused for good; redrivable
    FAILED: Final = "failed"
    ALL: Final = ("pending", "delivered", "failed")


#: The replay id of live deliveries (replays get a fresh one: see migration 0010).
LIVE_REPLAY_ID: Final = "00000000-0000-0000-0000-000000000000"

# $1 the deliveries, a JSON array of {id, subscription, event, topic, payload (JSON text),
# event_time, trace, replay (the nil uuid for live deliveries), schema (the topic schema version
# the event was validated against, or null)}: the deliveries of many events
# in one statement (a publish group commit, a backfill or replay batch; see
# ripple.platform.events.publish_writer); returns the event id of each delivery written.
INSERT_DELIVERIES_BATCH: Final = """
INSERT INTO ripple_webhook_deliveries
    (id, subscription_id, event_id, topic, payload, event_time, trace, replay_id, schema_version)
SELECT d.id, d.subscription, d.event, d.topic, d.payload::jsonb, d.event_time, d.trace, d.replay,
       d.schema
FROM jsonb_to_recordset($1::jsonb)
    AS d(id uuid, subscription uuid, event uuid, topic text, payload text,
         event_time timestamptz, trace jsonb, replay uuid, schema integer)
ON CONFLICT DO NOTHING
RETURNING event_id
"""

# $1 due deliveries to look at, $2 subscription ids to skip (saturated in this process),
# $3 the advisory lock class of claims.
# The first statement of a claim's transaction: the subscriptions with due deliveries whose
# budget allows a claim now, each locked for the rest of the transaction
# (`pg_try_advisory_xact_lock`: one claimer per subscription at a time, another skips it). A
# subscription whose budget is spent is left out before the due index is read, so its backlog
# never hides the deliveries of others: its circuit is open until a probe is due, its rate
# limit lets nothing through yet, or its held claims (`held`, across every dispatcher) reach its
# `maxInFlight`. Also returns the seconds until the soonest rate limit lets a due delivery
# through (NULL: none waits), so a dispatcher can claim again then; a schedule with nothing due
# behind it is no reason to wait (`run_until_idle` would sleep a whole period for nothing).
# That check reads the pending deliveries of paced endpoints only, by the subscription index.
LOCK_CLAIMABLE: Final = f"""
WITH held AS (
    SELECT subscription_id, count(*) AS n FROM ripple_webhook_deliveries
    WHERE claim_token IS NOT NULL AND next_attempt_at > now()
    GROUP BY subscription_id
), open AS (
    SELECT s.id FROM ripple_subscriptions s
    LEFT JOIN ripple_webhook_health h ON h.subscription_id = s.id
    LEFT JOIN held ON held.subscription_id = s.id
    WHERE s.status = 'active' AND s.kind = 'webhook'
      AND NOT (s.id = ANY($2::uuid[]))
      AND (h.circuit_open_until IS NULL OR h.circuit_open_until <= now())
      AND (h.rate_open_at IS NULL OR h.rate_open_at <= now())
      AND COALESCE(held.n, 0) < COALESCE((s.target->>'maxInFlight')::int, {DEFAULT_MAX_IN_FLIGHT})
), due AS (
    SELECT DISTINCT d.subscription_id FROM (
        SELECT d.subscription_id FROM ripple_webhook_deliveries d
        WHERE d.next_attempt_at <= now()
          AND d.subscription_id = ANY(ARRAY(SELECT id FROM open))
        ORDER BY d.next_attempt_at
        LIMIT $1
    ) AS d
)
SELECT ARRAY(
           SELECT subscription_id FROM due
           WHERE pg_try_advisory_xact_lock($3::int, hashtext(subscription_id::text))
       ) AS subs,
       (SELECT extract(epoch FROM min(h.rate_open_at) - now())::float8
        FROM ripple_webhook_health h
        WHERE h.rate_open_at > now()
          AND EXISTS (SELECT 1 FROM ripple_webhook_deliveries d
                      WHERE d.subscription_id = h.subscription_id AND d.status = 'pending'
                        AND d.next_attempt_at <= now())) AS rate_wait
"""  # noqa: S608

# $1 batch size, $2 the subscriptions LOCK_CLAIMABLE locked, $3/$4 in-flight counts in this
# process (subscription ids uuid[], counts int[]), $5 per-endpoint limit in this process,
# $6 claim token, $7 default timeout seconds, $8 lease margin seconds, $9 seconds between
# probes of an open circuit, $10 rate margin (share of a period), $11 rate burst (share of a
# period).
# The second statement (a fresh snapshot, so it sees every claim committed by the claimers that
# held these locks before): lock due deliveries of the locked subscriptions (skipping rows others
# hold) and claim, per subscription, at most its `budget`: what its `maxInFlight` leaves beside
# the claims it holds, one probe if its circuit is open, and what its rate limit allows now. The
# rate limit is a GCRA schedule in `rate_open_at`: deliveries are spaced `period / limit *
# (1 + $10)` apart with a burst of `period * $11`, so that even with the jitter between a claim
# and its request no receiver sees more than `limit` in any period. The claim counts the attempt
# (a dispatcher that keeps dying still uses up the budget) and pushes next_attempt_at to the
# lease expiry, so a dead dispatcher's delivery becomes due again by itself; the health row
# records the new rate schedule and, for a probe, when the next probe may go.
CLAIM_DUE: Final = f"""
WITH subs AS (
    SELECT s.id,
           COALESCE((s.target->>'maxInFlight')::int, {DEFAULT_MAX_IN_FLIGHT}) - (
               SELECT count(*) FROM ripple_webhook_deliveries c
               WHERE c.subscription_id = s.id AND c.claim_token IS NOT NULL
                 AND c.next_attempt_at > now()) AS room,
           h.circuit_open_until,
           (s.target->'rateLimit'->>'perSeconds')::float8
               * (1 + $10::float8) / (s.target->'rateLimit'->>'limit')::float8 AS spacing,
           (s.target->'rateLimit'->>'perSeconds')::float8 * $11::float8 AS burst,
           h.rate_open_at
    FROM ripple_subscriptions s
    LEFT JOIN ripple_webhook_health h ON h.subscription_id = s.id
    WHERE s.id = ANY($2::uuid[]) AND s.status = 'active' AND s.kind = 'webhook'
), budget AS (
    SELECT subs.id, subs.spacing, subs.burst, subs.circuit_open_until, t.tat,
           least(
               subs.room,
               CASE WHEN subs.circuit_open_until IS NULL THEN subs.room
                    WHEN subs.circuit_open_until <= now() THEN 1 ELSE 0 END,
               CASE WHEN subs.spacing IS NULL THEN subs.room
                    ELSE floor(extract(epoch FROM now() - t.tat) / subs.spacing
                               + subs.burst / subs.spacing)::int + 1 END
           ) AS n
    FROM subs, LATERAL (
        SELECT greatest(
            now(),
            subs.rate_open_at + make_interval(secs => COALESCE(subs.burst, 0))) AS tat
    ) AS t
), due AS (
    SELECT d.id, d.subscription_id, d.next_attempt_at
    FROM ripple_webhook_deliveries d
    WHERE d.next_attempt_at <= now()
      AND d.subscription_id = ANY(ARRAY(SELECT id FROM budget WHERE n > 0))
    ORDER BY d.next_attempt_at
    LIMIT $1
    FOR UPDATE OF d SKIP LOCKED
), busy AS (
    SELECT b.sub, b.n FROM unnest($3::uuid[], $4::int[]) AS b(sub, n)
), ranked AS (
    SELECT due.id, due.subscription_id,
           row_number() OVER (PARTITION BY due.subscription_id ORDER BY due.next_attempt_at)
             AS rank
    FROM due
), claimed AS (
    UPDATE ripple_webhook_deliveries d
    SET attempts = d.attempts + 1,
        claim_token = $6,
        next_attempt_at = now() + make_interval(
            secs => COALESCE((s.target->>'timeout')::float8, $7) + $8),
        updated_at = now()
    FROM ranked r
    JOIN budget b ON b.id = r.subscription_id
    LEFT JOIN busy ON busy.sub = r.subscription_id
    JOIN ripple_subscriptions s ON s.id = r.subscription_id
    WHERE d.id = r.id AND r.rank <= b.n AND r.rank + COALESCE(busy.n, 0) <= $5
    RETURNING d.id, d.subscription_id, d.event_id, d.topic,
              COALESCE(d.payload::text, 'null') AS payload, d.event_time, d.attempts,
              d.claim_token, d.trace, s.target::text AS target, d.schema_version
), counts AS (
    SELECT subscription_id, count(*) AS n FROM claimed GROUP BY subscription_id
), spent AS (
    INSERT INTO ripple_webhook_health AS h (subscription_id, rate_open_at, circuit_open_until)
    SELECT b.id,
           CASE WHEN b.spacing IS NOT NULL THEN b.tat
               + make_interval(secs => c.n * b.spacing - b.burst) END,
           CASE WHEN b.circuit_open_until IS NOT NULL
               THEN now() + make_interval(secs => $9::float8) END
    FROM budget b JOIN counts c ON c.subscription_id = b.id
    WHERE b.spacing IS NOT NULL OR b.circuit_open_until IS NOT NULL
    ORDER BY b.id
    ON CONFLICT (subscription_id) DO UPDATE SET
        rate_open_at = EXCLUDED.rate_open_at,
        circuit_open_until = CASE WHEN h.circuit_open_until IS NULL THEN NULL
                                  ELSE EXCLUDED.circuit_open_until END
)
SELECT * FROM claimed
"""  # noqa: S608

# $1 delivery ids uuid[], $2 their claim tokens uuid[], $3 attempts to give back (1: the claims
# were never attempted, so the claim's count is undone; 0: cancelled attempts, which may have
# reached the endpoint). Gives up claims (shutdown, a stale or purged buffer): due now.
# Rows are found by id (`= ANY($1)`: the primary key, whatever the statistics say); a held token
# implies a pending delivery (constraint ripple_webhook_deliveries_claimed_pending, 0015).
RELEASE_CLAIMS: Final = """
UPDATE ripple_webhook_deliveries d
SET claim_token = NULL, next_attempt_at = now(), attempts = d.attempts - $3::int,
    updated_at = now()
FROM unnest($1::uuid[], $2::uuid[]) AS c(id, token)
WHERE d.id = ANY($1::uuid[]) AND d.id = c.id AND d.claim_token = c.token
"""

# $1 the finished attempts, a JSON array of objects with the keys the record type below names
# (one document instead of thirteen parallel arrays: asyncpg type-checks every array element in
# Python, a cost per attempt), $2 disable-after seconds, $3 consecutive failures that open an
# endpoint's circuit, $4 seconds from a failure of an open circuit to its next probe.
# One statement for many finished attempts: end each claim still held (`d`), record its attempt
# (`a`) and fold the batch's outcomes into each endpoint's health row (`h`: a success in the
# batch makes it healthy; ON CONFLICT may touch a row once, hence the per-subscription
# aggregate; last_success_at of a healthy endpoint is kept to the second). Per input row:
# owned (its claim was still held) and exhausted (it failed and its endpoint has been failing
# for $2 seconds).
# `d` finds the deliveries by id (`= ANY(ARRAY(...))` is a primary-key lookup whatever the
# statistics say) and token alone: a held token implies a pending delivery (constraint
# ripple_webhook_deliveries_claimed_pending, migration 0015). With `status = 'pending'` tested
# too, a table not analyzed since a backlog arrived got a plan that read every pending delivery
# through the status index for each batch.
FINISH_ATTEMPTS: Final = """
WITH i AS (
    SELECT * FROM jsonb_to_recordset($1::jsonb)
        AS i(id uuid, token uuid, status text, delay float8, status_code int, last_error text,
             attempt int, started_at timestamptz, latency_ms float8, outcome text, error text,
             response_body text, healthy boolean)
), d AS (
    UPDATE ripple_webhook_deliveries w
    SET status = i.status, claim_token = NULL,
        next_attempt_at = CASE WHEN i.status = 'pending'
            THEN now() + make_interval(secs => i.delay) END,
        last_status_code = i.status_code, last_error = i.last_error,
        delivered_at = CASE WHEN i.status = 'delivered' THEN now() ELSE w.delivered_at END,
        updated_at = now()
    FROM i
    WHERE w.id = ANY(ARRAY(SELECT i.id FROM i)) AND w.id = i.id AND w.claim_token = i.token
    RETURNING w.id, w.subscription_id
), a AS (
    INSERT INTO ripple_webhook_attempts
        (delivery_id, attempt, started_at, latency_ms, outcome, status_code, error,
         response_body)
    SELECT i.id, i.attempt, i.started_at, i.latency_ms, i.outcome, i.status_code, i.error,
           i.response_body
    FROM i JOIN d ON d.id = i.id
), per_sub AS (
    SELECT d.subscription_id, bool_or(i.healthy) AS any_ok, bool_and(i.healthy) AS all_ok,
           count(*) FILTER (WHERE NOT i.healthy) AS failures
    FROM i JOIN d ON d.id = i.id
    GROUP BY d.subscription_id
), h AS (
    INSERT INTO ripple_webhook_health AS h
        (subscription_id, failing_since, last_success_at, last_failure_at,
         consecutive_failures, circuit_open_until)
    SELECT p.subscription_id,
           CASE WHEN p.any_ok THEN NULL ELSE now() END,
           CASE WHEN p.any_ok THEN now() END,
           CASE WHEN p.all_ok THEN NULL ELSE now() END,
           CASE WHEN p.any_ok THEN 0 ELSE p.failures END,
           CASE WHEN NOT p.any_ok AND p.failures >= $3::int
                THEN now() + make_interval(secs => $4::float8) END
    FROM per_sub p
    -- An endpoint known healthy for under a second is not touched at all: ON CONFLICT locks
    -- the row before its WHERE is tested, and concurrent batches queued behind that lock.
    WHERE NOT (p.all_ok AND EXISTS (
        SELECT 1 FROM ripple_webhook_health c
        WHERE c.subscription_id = p.subscription_id AND c.failing_since IS NULL
          AND c.last_success_at >= now() - interval '1 second'))
    ORDER BY p.subscription_id  -- one lock order for every batch: no deadlocks between them
    ON CONFLICT (subscription_id) DO UPDATE SET
        failing_since = CASE WHEN EXCLUDED.last_success_at IS NOT NULL THEN NULL
                             ELSE COALESCE(h.failing_since, now()) END,
        last_success_at = COALESCE(EXCLUDED.last_success_at, h.last_success_at),
        last_failure_at = COALESCE(EXCLUDED.last_failure_at, h.last_failure_at),
        -- the circuit breaker: a success closes it; the $3-th failure in a row opens it (or
        -- keeps it open: the next probe waits $4 seconds from this failure)
        consecutive_failures = CASE WHEN EXCLUDED.last_success_at IS NOT NULL THEN 0
            ELSE h.consecutive_failures + EXCLUDED.consecutive_failures END,
        circuit_open_until = CASE WHEN EXCLUDED.last_success_at IS NOT NULL THEN NULL
            WHEN h.consecutive_failures + EXCLUDED.consecutive_failures >= $3::int
            THEN now() + make_interval(secs => $4::float8)
            ELSE h.circuit_open_until END
    -- a healthy endpoint's row is rewritten at most once a second (not once per batch)
    WHERE h.failing_since IS NOT NULL OR EXCLUDED.last_failure_at IS NOT NULL
       OR h.last_success_at IS NULL OR h.last_success_at < now() - interval '1 second'
    RETURNING h.subscription_id,
              h.failing_since IS NOT NULL
              AND now() - h.failing_since >= make_interval(secs => $2::float8) AS exhausted
)
SELECT i.id, d.id IS NOT NULL AS owned,
       COALESCE(NOT i.healthy AND h.exhausted, false) AS exhausted
FROM i LEFT JOIN d ON d.id = i.id LEFT JOIN h ON h.subscription_id = d.subscription_id
"""

# $1 batch size. Dead-letters pending deliveries whose subscription no longer exists.
FAIL_ORPHANS: Final = """
UPDATE ripple_webhook_deliveries
SET status = 'failed', claim_token = NULL, next_attempt_at = NULL, updated_at = now(),
    last_error = 'subscription was deleted'
WHERE id IN (
    SELECT d.id FROM ripple_webhook_deliveries d
    WHERE d.status = 'pending'
      AND NOT EXISTS (SELECT 1 FROM ripple_subscriptions s WHERE s.id = d.subscription_id)
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
"""

_COLUMNS: Final = """id, subscription_id, event_id, topic, status, attempts, next_attempt_at,
    last_status_code, last_error, created_at, updated_at, delivered_at"""

# $1 status or NULL, $2 subscription id or NULL, $3 cursor (last id seen) or NULL, $4 limit
LIST_DELIVERIES: Final = f"""
SELECT {_COLUMNS}
FROM ripple_webhook_deliveries
WHERE ($1::text IS NULL OR status = $1)
  AND ($2::uuid IS NULL OR subscription_id = $2)
  AND ($3::uuid IS NULL OR id < $3)
ORDER BY id DESC
LIMIT $4
"""  # noqa: S608 - _COLUMNS is a constant, not input

# $1 id
GET_DELIVERY: Final = f"SELECT {_COLUMNS} FROM ripple_webhook_deliveries WHERE id = $1"  # noqa: S608

# $1 delivery id
LIST_ATTEMPTS: Final = """
SELECT attempt, started_at, latency_ms, outcome, status_code, error, response_body
FROM ripple_webhook_attempts WHERE delivery_id = $1 ORDER BY id
"""

# $1 subscription id. Locks a webhook subscription's target for a secret rotation.
SELECT_TARGET_FOR_UPDATE: Final = """
SELECT target FROM ripple_subscriptions WHERE id = $1 AND kind = 'webhook' FOR UPDATE
"""

# $1 subscription id, $2 target
UPDATE_TARGET: Final = """
UPDATE ripple_subscriptions SET target = $2, updated_at = now() WHERE id = $1
"""

# $1 subscription ids uuid[]: each endpoint's health, budget and held claims (no row: healthy,
# nothing held).
SELECT_ENDPOINTS: Final = """
SELECT s.id AS subscription_id, h.failing_since, h.last_success_at, h.last_failure_at,
       COALESCE(h.consecutive_failures, 0) AS consecutive_failures, h.circuit_open_until,
       (SELECT count(*) FROM ripple_webhook_deliveries c
        WHERE c.subscription_id = s.id AND c.claim_token IS NOT NULL
          AND c.next_attempt_at > now())::int AS in_flight
FROM unnest($1::uuid[]) WITH ORDINALITY AS s(id, n)
LEFT JOIN ripple_webhook_health h ON h.subscription_id = s.id
ORDER BY s.n
"""

# $1 subscription id. Closes the endpoint's circuit (a failure opens it again only after the
# full count of failures in a row); returns whether it was open.
CLOSE_CIRCUIT: Final = """
UPDATE ripple_webhook_health n SET consecutive_failures = 0, circuit_open_until = NULL
FROM ripple_webhook_health o
WHERE n.subscription_id = $1 AND o.subscription_id = n.subscription_id
RETURNING o.circuit_open_until IS NOT NULL AS was_open
"""

# $1 subscription id. Its pending deliveries that wait (for a retry, or behind the circuit) are
# due now; claimed ones are left to their claim.
DUE_NOW: Final = """
UPDATE ripple_webhook_deliveries
SET next_attempt_at = now(), updated_at = now()
WHERE subscription_id = $1 AND status = 'pending' AND claim_token IS NULL
  AND next_attempt_at > now()
"""

# $1 id. Back to pending with a fresh attempt budget, due now.
REDRIVE: Final = """
UPDATE ripple_webhook_deliveries
SET status = 'pending', attempts = 0, next_attempt_at = now(), claim_token = NULL,
    updated_at = now()
WHERE id = $1 AND status = 'failed'
RETURNING id
"""

# $1 subscription id or NULL, $2 failed-since time or NULL
REDRIVE_FAILED: Final = """
UPDATE ripple_webhook_deliveries
SET status = 'pending', attempts = 0, next_attempt_at = now(), claim_token = NULL,
    updated_at = now()
WHERE status = 'failed'
  AND ($1::uuid IS NULL OR subscription_id = $1)
  AND ($2::timestamptz IS NULL OR updated_at >= $2)
"""


@dataclass(frozen=True, slots=True)
class Delivery:
    """A webhook delivery as operators list it."""

    id: str
    subscription_id: str
    event_id: str
    topic: str
    status: str
    attempts: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    delivered_at: datetime | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Delivery:
        status = row["status"]
        return cls(
            id=str(row["id"]),
            subscription_id=str(row["subscription_id"]),
            event_id=str(row["event_id"]),
            topic=row["topic"],
            status=status,
            attempts=row["attempts"],
            next_attempt_at=row["next_attempt_at"] if status == DeliveryStatus.PENDING else None,
            last_status_code=row["last_status_code"],
            last_error=row["last_error"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            delivered_at=row["delivered_at"],
        )


@dataclass(frozen=True, slots=True)
class DeliveryPage:
    """A page of deliveries, newest first; pass `next_cursor` for the next page."""

    items: list[Delivery]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One recorded attempt of a delivery."""

    attempt: int
    started_at: datetime
    latency_ms: float
    outcome: str
    status_code: int | None
    error: str | None
    response_body: str | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> Attempt:
        return cls(
            attempt=row["attempt"],
            started_at=row["started_at"],
            latency_ms=row["latency_ms"],
            outcome=row["outcome"],
            status_code=row["status_code"],
            error=row["error"],
            response_body=row["response_body"],
        )


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    """A delivery claimed for one attempt, with its subscription's current target."""

    id: str
    subscription_id: str
    event_id: str
    topic: str
    #: the event's payload as JSON text
    payload_json: str
    event_time: datetime
    #: this attempt's number (1-based)
    attempt: int
    claim_token: uuid.UUID
    trace: dict[str, str] | None
    #: the subscription's target as claimed (shared by its deliveries: read, never mutate)
    target: dict[str, Any]
    #: the topic schema version the event was validated against (None: no schema)
    schema_version: int | None = None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> ClaimedDelivery:
        return cls(
            id=str(row["id"]),
            subscription_id=str(row["subscription_id"]),
            event_id=str(row["event_id"]),
            topic=row["topic"],
            payload_json=row["payload"],
            event_time=row["event_time"],
            attempt=row["attempts"],
            claim_token=row["claim_token"],
            trace=row["trace"],
            target=_target(row["target"]),
            schema_version=row["schema_version"],
        )


@functools.lru_cache(maxsize=1024)
def _target(text: str) -> dict[str, Any]:
    """The target whose JSON text is `text`, decoded once (a claim returns the subscription's
    target with every delivery). Shared between deliveries: read, never mutate."""
    target: dict[str, Any] = json.loads(text)
    return target


def parse_uuid(value: str) -> uuid.UUID | None:
    """`value` as a UUID, or None when it is not one."""
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


async def insert_deliveries_batch(
    conn: Connection,
    ids: Sequence[str],
    subscription_ids: Sequence[str],
    event_ids: Sequence[str],
    topics: Sequence[str],
    payloads: Sequence[str],
    event_times: Sequence[datetime],
    traces: Sequence[dict[str, str] | None],
    replay_ids: Sequence[str] | None = None,
    schema_versions: Sequence[int | None] | None = None,
) -> Counter[str]:
    """Insert pending deliveries of many events (skipping existing (event, subscription,
    replay) triples); how many were written, by event id. `payloads` are JSON text;
    `replay_ids`: None for live deliveries."""
    replays = replay_ids if replay_ids is not None else [LIVE_REPLAY_ID] * len(ids)
    schemas = schema_versions if schema_versions is not None else [None] * len(ids)
    # One JSON document, not eight parallel arrays (asyncpg type-checks every array element).
    doc = [
        {
            "id": i,
            "subscription": s,
            "event": e,
            "topic": t,
            "payload": p,
            "event_time": w.isoformat(),
            "trace": c,
            "replay": r,
            "schema": v,
        }
        for i, s, e, t, p, w, c, r, v in zip(
            ids,
            subscription_ids,
            event_ids,
            topics,
            payloads,
            event_times,
            traces,
            replays,
            schemas,
            strict=True,
        )
    ]
    rows = await conn.fetch(INSERT_DELIVERIES_BATCH, doc)
    return Counter(str(row[0]) for row in rows)


#: The advisory lock class of webhook claims (LOCK_CLAIMABLE's $3; the object is a hash of
#: the subscription id).
CLAIM_LOCK_CLASS: Final = 0x52575048
#: The rate limit paces deliveries this share of a period slower than `limit / period`, and
#: lets a burst of BURST_SHARE of a period go at once: the margin absorbs the burst and the
#: jitter between a claim and its request, so a receiver never counts more than `limit`.
RATE_MARGIN: Final = 0.1
RATE_BURST: Final = 0.03


@dataclass(frozen=True, slots=True)
class Claim:
    """What one claim took, and how long until a rate limit lets the next one through."""

    deliveries: list[ClaimedDelivery]
    #: seconds until the soonest rate-limited endpoint may have another delivery (None: none)
    rate_wait: float | None


async def claim_due(
    conn: Connection,
    *,
    limit: int,
    endpoint_limit: int,
    in_flight: Mapping[str, int],
    default_timeout: float,
    lease_margin: float,
    probe_interval: float,
) -> Claim:
    """Claim up to `limit` due deliveries (one transaction of two statements).

    A subscription (one endpoint) gets at most `endpoint_limit` deliveries in flight in this
    process, counting `in_flight` (this process's attempts in progress), and at most what its
    budget (`maxInFlight`, `rateLimit`, circuit breaker) allows across every process.
    """
    subs = list(in_flight)
    saturated = [uuid.UUID(s) for s in subs if in_flight[s] >= endpoint_limit]
    async with conn.transaction():
        row = await conn.fetchrow(LOCK_CLAIMABLE, limit, saturated, CLAIM_LOCK_CLASS)
        assert row is not None
        locked, rate_wait = row["subs"], row["rate_wait"]
        if not locked:
            return Claim([], rate_wait)
        rows = await conn.fetch(
            CLAIM_DUE,
            limit,
            locked,
            [uuid.UUID(s) for s in subs],
            [in_flight[s] for s in subs],
            endpoint_limit,
            uuid.uuid4(),
            default_timeout,
            lease_margin,
            probe_interval,
            RATE_MARGIN,
            RATE_BURST,
        )
    return Claim([ClaimedDelivery.from_row(row) for row in rows], rate_wait)


@dataclass(frozen=True, slots=True)
class FinishedAttempt:
    """The outcome of one attempt, to end its claim with (`finish_attempts`)."""

    delivery: ClaimedDelivery
    #: the delivery's new status: delivered, pending (retry) or failed
    status: str
    #: seconds until the retry (status pending)
    delay: float
    status_code: int | None
    last_error: str | None
    started_at: datetime
    latency_ms: float
    #: the attempt's outcome: delivered, retry, failed or disable
    outcome: str
    error: str | None
    response_body: str | None
    #: True when the endpoint answered with success
    healthy: bool


@dataclass(frozen=True, slots=True)
class Breaker:
    """The circuit breaker's settings: `failures` in a row open an endpoint's circuit; an open
    one lets one probe through every `probe_interval` seconds."""

    failures: int
    probe_interval: float


async def finish_attempts(
    conn: Connection,
    attempts: Sequence[FinishedAttempt],
    disable_after: float,
    breaker: Breaker,
) -> list[tuple[bool, bool]]:
    """End claims with their outcomes, record the attempts and the endpoints' health.

    One statement for the whole batch. Returns (owned, exhausted) per attempt, in order: owned
    is False when the claim was lost (nothing written for it); exhausted is True when it failed
    and its endpoint has failed continuously for `disable_after` seconds.
    """
    if not attempts:
        return []
    rows = await conn.fetch(
        FINISH_ATTEMPTS,
        finish_document(attempts),
        disable_after,
        breaker.failures,
        breaker.probe_interval,
    )
    by_id = {str(row["id"]): (bool(row["owned"]), bool(row["exhausted"])) for row in rows}
    return [by_id[a.delivery.id] for a in attempts]


def finish_document(attempts: Sequence[FinishedAttempt]) -> list[dict[str, Any]]:
    """FINISH_ATTEMPTS' $1 (jsonb: the pool encodes it) for `attempts`."""
    return [
        {
            "id": a.delivery.id,
            "token": str(a.delivery.claim_token),
            "status": a.status,
            "delay": a.delay,
            "status_code": a.status_code,
            "last_error": a.last_error,
            "attempt": a.delivery.attempt,
            "started_at": a.started_at.isoformat(),
            "latency_ms": a.latency_ms,
            "outcome": a.outcome,
            "error": a.error,
            "response_body": a.response_body,
            "healthy": a.healthy,
        }
        for a in attempts
    ]


async def release_claims(
    conn: Connection, claims: Sequence[ClaimedDelivery], *, attempted: bool = True
) -> int:
    """Give up claims still held; return how many. `attempted`: their attempts were started
    (then cancelled) and stay counted; False (never sent) gives the claim's count back."""
    status = await conn.execute(
        RELEASE_CLAIMS,
        [uuid.UUID(c.id) for c in claims],
        [c.claim_token for c in claims],
        0 if attempted else 1,
    )
    return int(status.rsplit(" ", 1)[-1])


async def disable_subscription(conn: Connection, subscription_id: str, reason: str) -> bool:
    """Disable a webhook subscription; False if it was already disabled or is gone.

    The subscriptions table is written by its owner, `ripple.platform.events.subscription_store`."""
    return await subscription_store.disable(conn, subscription_id, reason)


async def fail_orphans(conn: Connection, limit: int = 1000) -> int:
    """Dead-letter pending deliveries whose subscription was deleted; return how many."""
    status = await conn.execute(FAIL_ORPHANS, limit)
    return int(status.rsplit(" ", 1)[-1])


async def list_deliveries(
    conn: Connection,
    *,
    status: str | None,
    subscription_id: uuid.UUID | None,
    cursor: uuid.UUID | None,
    limit: int,
) -> DeliveryPage:
    """A page of deliveries, newest first."""
    rows = await conn.fetch(LIST_DELIVERIES, status, subscription_id, cursor, limit + 1)
    items = [Delivery.from_row(row) for row in rows[:limit]]
    next_cursor = items[-1].id if len(rows) > limit and items else None
    return DeliveryPage(items=items, next_cursor=next_cursor)


async def get_delivery(conn: Connection, delivery_id: uuid.UUID) -> Delivery | None:
    """One delivery, or None."""
    row = await conn.fetchrow(GET_DELIVERY, delivery_id)
    return None if row is None else Delivery.from_row(row)


async def list_attempts(conn: Connection, delivery_id: uuid.UUID) -> list[Attempt]:
    """Every attempt of a delivery, oldest first."""
    return [Attempt.from_row(row) for row in await conn.fetch(LIST_ATTEMPTS, delivery_id)]


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    """A webhook subscription's endpoint as the dispatcher sees it: its circuit breaker
    (`circuit`: "closed", or "open" until `next_probe_at`), failures in a row and deliveries
    in flight (held claims, across every dispatcher)."""

    subscription_id: str
    circuit: str
    consecutive_failures: int
    next_probe_at: datetime | None
    in_flight: int
    failing_since: datetime | None
    last_success_at: datetime | None
    last_failure_at: datetime | None

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> EndpointHealth:
        probe = row["circuit_open_until"]
        return cls(
            subscription_id=str(row["subscription_id"]),
            circuit="closed" if probe is None else "open",
            consecutive_failures=row["consecutive_failures"],
            next_probe_at=probe,
            in_flight=row["in_flight"],
            failing_since=row["failing_since"],
            last_success_at=row["last_success_at"],
            last_failure_at=row["last_failure_at"],
        )


async def endpoints(
    conn: Connection, subscription_ids: Sequence[uuid.UUID]
) -> list[EndpointHealth]:
    """The endpoint health of each subscription, in order."""
    rows = await conn.fetch(SELECT_ENDPOINTS, list(subscription_ids))
    return [EndpointHealth.from_row(row) for row in rows]


async def close_circuit(conn: Connection, subscription_id: uuid.UUID) -> bool:
    """Close the endpoint's circuit; whether it was open."""
    return bool(await conn.fetchval(CLOSE_CIRCUIT, subscription_id))


async def due_now(conn: Connection, subscription_id: uuid.UUID) -> int:
    """Make the subscription's waiting (unclaimed) pending deliveries due now; how many."""
    status = await conn.execute(DUE_NOW, subscription_id)
    return int(status.rsplit(" ", 1)[-1])


async def redrive(conn: Connection, delivery_id: uuid.UUID) -> bool:
    """Failed delivery back to pending with a fresh budget; False if it is not failed."""
    return await conn.fetchval(REDRIVE, delivery_id) is not None


async def redrive_failed(
    conn: Connection, *, subscription_id: uuid.UUID | None, since: datetime | None
) -> int:
    """Every failed delivery matching the filter back to pending; return how many."""
    status = await conn.execute(REDRIVE_FAILED, subscription_id, since)
    return int(status.rsplit(" ", 1)[-1])


async def webhook_target_for_update(
    conn: Connection, subscription_id: uuid.UUID
) -> dict[str, Any] | None:
    """A webhook subscription's target, row-locked until the transaction ends; None if absent."""
    target: dict[str, Any] | None = await conn.fetchval(SELECT_TARGET_FOR_UPDATE, subscription_id)
    return target


async def update_target(
    conn: Connection, subscription_id: uuid.UUID, target: dict[str, Any]
) -> None:
    """Store a subscription's new target."""
    await conn.execute(UPDATE_TARGET, subscription_id, target)
