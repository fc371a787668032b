"""SQL for durable queues: send, claim (receive), ack, visibility, dead letters; row mapping.

Claims lock candidates with `FOR UPDATE SKIP LOCKED` on partial indexes, so concurrent
receivers never take the same message. A message's receipt is (id, receive_count): every
receive bumps receive_count, so a receipt from an earlier delivery matches no row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import asyncpg

from ripple.platform.core.db import Connection

__all__ = [
    "STATS_CAP",
    "DeadLetter",
    "QueueStats",
    "ack_receipts",
    "bury",
    "claim_messages",
    "insert_bodies",
    "insert_messages",
    "set_visibility",
]

# Whether deduplication id `m.dedup` of queue `{queue}` is held: by a message or by a dead
# letter. Both are read in the statement's one snapshot, in which a message being moved to the
# dead letters (one transaction) is in exactly one of them; the messages' unique index (ON
# CONFLICT) settles concurrent sends. A LATERAL with LIMIT, so each is an index probe per
# message, never a hash of a whole table.
DEDUP_HELD: Final = """LEFT JOIN LATERAL (
    SELECT 1 AS held FROM ripple_queue_messages x
    WHERE x.queue = {queue} AND x.deduplication_id = m.dedup
    UNION ALL
    SELECT 1 FROM ripple_queue_dead_keys k
    WHERE k.queue = {queue} AND k.deduplication_id = m.dedup
    LIMIT 1
) AS h ON m.dedup IS NOT NULL"""

# $1 queue, $2 the messages, a JSON array of {body (JSON text), headers (JSON text), group_id,
# dedup, delay (seconds)}. A deduplication id already present inserts nothing. (Bodies arrive
# as text the caller already encoded while checking its limits.)
INSERT_MESSAGES: Final = f"""
INSERT INTO ripple_queue_messages (queue, body, headers, group_id, deduplication_id, visible_at)
SELECT $1, m.body::jsonb, m.headers::jsonb, m.group_id, m.dedup,
       CASE WHEN m.delay > 0 THEN now() + make_interval(secs => m.delay) ELSE now() END
FROM jsonb_to_recordset($2::jsonb)
    AS m(body text, headers text, group_id text, dedup text, delay float8)
{DEDUP_HELD.format(queue="$1")}
WHERE h.held IS NULL
ON CONFLICT (queue, deduplication_id) WHERE deduplication_id IS NOT NULL DO NOTHING
RETURNING id, deduplication_id
"""  # noqa: S608
# $1 queue, $2 bare bodies as one JSON array text (no headers, group, dedup or delay): the
# array is parsed once here, not a document of JSON strings parsed twice. Ids in array order.
INSERT_BODIES: Final = """
INSERT INTO ripple_queue_messages (queue, body)
SELECT $1, b.body FROM jsonb_array_elements($2::text::jsonb) WITH ORDINALITY AS b(body, n)
ORDER BY b.n
RETURNING id::text
"""
# $1 the messages, a JSON array of {queue, body (JSON text), topic, event, dedup}: fan-out of
# many events to many queues in one statement (ungrouped, visible now). The headers
# `{"topic", "eventId"}` are built here.
_INSERT_FANOUT: Final = """
INSERT INTO ripple_queue_messages (queue, body, headers, deduplication_id)
SELECT m.queue, m.body::jsonb,
       jsonb_strip_nulls(jsonb_build_object('topic', m.topic, 'eventId', m.event,
                                            'schemaVersion', m.schema)),
       m.dedup
FROM jsonb_to_recordset($1::jsonb)
    AS m(queue text, body text, topic text, event text, dedup text, schema integer)
{held}
ON CONFLICT (queue, deduplication_id) WHERE deduplication_id IS NOT NULL DO NOTHING
"""
INSERT_FANOUT: Final = _INSERT_FANOUT.format(
    held=DEDUP_HELD.format(queue="m.queue") + "\nWHERE h.held IS NULL"
)
# The fan-out of events this very publish wrote: their deduplication ids are new, so neither
# a live message nor a dead letter can hold one, and the probes are skipped.
INSERT_FANOUT_FRESH: Final = _INSERT_FANOUT.format(held="")
# $1 queue, $2 dedup ids text[]: ids of existing messages (or dead letters) with these
# deduplication ids
SELECT_BY_DEDUP: Final = """
SELECT id, deduplication_id FROM ripple_queue_messages
WHERE queue = $1 AND deduplication_id = ANY($2::text[])
UNION ALL
SELECT message_id, deduplication_id FROM ripple_queue_dead_keys
WHERE queue = $1 AND deduplication_id = ANY($2::text[])
"""

# The end of a receive's CTEs, shared by CLAIM_MESSAGES and CLAIM_FAIR ($1 queue, $3 visibility
# timeout, $4 default max receives): `claimed` delivers the rows of `picked` (receive_count + 1,
# invisible for $3 s), except messages already received max_receives times, which it marks
# dying (`dead_at`) instead, for BURY to move to the dead letters right after: the receive
# itself carries no DELETE and INSERT for the rare dying message.
_RECEIVE_PICKED: Final = """), lim AS MATERIALIZED (
    SELECT coalesce((SELECT max_receives FROM ripple_queues WHERE name = $1), $4) AS n
), claimed AS (
UPDATE ripple_queue_messages m SET
    receive_count = CASE WHEN m.receive_count < lim.n
                         THEN m.receive_count + 1 ELSE m.receive_count END,
    visible_at = CASE WHEN m.receive_count < lim.n
                      THEN now() + make_interval(secs => $3) ELSE m.visible_at END,
    dead_at = CASE WHEN m.receive_count < lim.n THEN NULL ELSE now() END
FROM lim
WHERE m.id = ANY(ARRAY(SELECT id FROM picked))
RETURNING m.id, m.body, m.headers, m.group_id, m.receive_count, m.dead_at IS NOT NULL AS dead
)"""

# $1 queue, $2 max messages, $3 visibility timeout (seconds), $4 default max receives
# Steps: `ready` = visible ungrouped messages, oldest visibility first; `heads` = the lowest
# id of each FIFO group (a group whose head is in flight or delayed yields nothing, which is
# what makes groups single-flight); `picked` locks up to $2 of both, skipping rows other
# receivers hold; the UPDATE delivers them (receive_count + 1, invisible for $3 s), except
# messages already received max_receives times, which become dead letters instead. Rows come
# back oldest id first as (id text, body, headers (NULL for none), group_id, receive_count,
# receipt, dead): what `Message` holds, so the client builds nothing else per message.
CLAIM_MESSAGES: Final = f"""
WITH ready AS (
    SELECT id, receive_count FROM ripple_queue_messages
    WHERE queue = $1 AND dead_at IS NULL AND group_id IS NULL AND visible_at <= now()
    ORDER BY visible_at
    LIMIT $2
    FOR UPDATE SKIP LOCKED
), heads AS (
    SELECT DISTINCT ON (group_id) id FROM ripple_queue_messages
    WHERE queue = $1 AND dead_at IS NULL AND group_id IS NOT NULL
    ORDER BY group_id, id
), grouped AS (
    SELECT m.id, m.receive_count FROM ripple_queue_messages m JOIN heads h ON m.id = h.id
    WHERE m.visible_at <= now() AND m.dead_at IS NULL
    ORDER BY m.id
    LIMIT $2
    FOR UPDATE OF m SKIP LOCKED
), picked AS (
    SELECT id FROM ready
    UNION ALL
    (SELECT id FROM grouped)
    LIMIT $2
{_RECEIVE_PICKED}
SELECT id::text, body, NULLIF(headers, '{{}}'::jsonb) AS headers, group_id, receive_count,
    id::text || '.' || receive_count::text AS receipt, dead
FROM claimed ORDER BY id
"""  # noqa: S608
# $1 queue, $2 max messages, $3 visibility timeout (seconds), $4 default max receives
# The fair receive: a round robin across lanes, each FIFO group (`group_id`) one lane and the
# ungrouped messages one more, so a group with a huge backlog takes one message per turn like
# any other. Steps: `groups` lists the queue's groups by skipping through the group index
# (one probe per group, whatever their backlogs); `grouped` takes each group's first $2 live
# messages and keeps the run of visible ones from its head (FIFO: nothing behind a message in
# flight or delayed), ranked 1, 2, ... within the group; `ready` ranks the visible ungrouped
# messages the same way; `turns` takes $2 in turn order (every lane's first, then every lane's
# second, ...; oldest first within a turn); `locked` locks them, skipping rows other receivers
# hold and re-checking visibility; `picked` keeps, per group, only an unbroken run from its head
# (a skipped message drops those behind it). The rest is _RECEIVE_PICKED, rows in turn order.
CLAIM_FAIR: Final = f"""
WITH RECURSIVE groups AS (
    (SELECT group_id FROM ripple_queue_messages
     WHERE queue = $1 AND dead_at IS NULL AND group_id IS NOT NULL
     ORDER BY group_id LIMIT 1)
    UNION ALL
    SELECT (SELECT m.group_id FROM ripple_queue_messages m
            WHERE m.queue = $1 AND m.dead_at IS NULL AND m.group_id IS NOT NULL
              AND m.group_id > g.group_id
            ORDER BY m.group_id LIMIT 1)
    FROM groups g WHERE g.group_id IS NOT NULL
), grouped AS (
    SELECT f.id, f.rank FROM groups g CROSS JOIN LATERAL (
        SELECT x.id, row_number() OVER (ORDER BY x.id) AS rank,
               bool_and(x.visible_at <= now()) OVER (ORDER BY x.id) AS run
        FROM (SELECT m.id, m.visible_at FROM ripple_queue_messages m
              WHERE m.queue = $1 AND m.dead_at IS NULL AND m.group_id = g.group_id
              ORDER BY m.id LIMIT $2) AS x
    ) AS f
    WHERE g.group_id IS NOT NULL AND f.run
), ready AS (
    SELECT r.id, row_number() OVER (ORDER BY r.visible_at, r.id) AS rank
    FROM (SELECT id, visible_at FROM ripple_queue_messages
          WHERE queue = $1 AND dead_at IS NULL AND group_id IS NULL AND visible_at <= now()
          ORDER BY visible_at LIMIT $2) AS r
), turns AS (
    SELECT u.id, u.rank
    FROM (SELECT id, rank FROM grouped UNION ALL SELECT id, rank FROM ready) AS u
    ORDER BY u.rank, u.id
    LIMIT $2
), locked AS (
    SELECT m.id, m.group_id, t.rank FROM ripple_queue_messages m JOIN turns t ON t.id = m.id
    WHERE m.visible_at <= now() AND m.dead_at IS NULL
    FOR UPDATE OF m SKIP LOCKED
), picked AS (
    SELECT p.id, p.rank FROM (
        SELECT l.id, l.rank, l.group_id,
               row_number() OVER (PARTITION BY l.group_id ORDER BY l.rank) AS k
        FROM locked l
    ) AS p
    WHERE p.group_id IS NULL OR p.k = p.rank
{_RECEIVE_PICKED}
SELECT c.id::text, c.body, NULLIF(c.headers, '{{}}'::jsonb) AS headers, c.group_id,
    c.receive_count, c.id::text || '.' || c.receive_count::text AS receipt, c.dead
FROM claimed c JOIN picked p ON p.id = c.id ORDER BY p.rank, c.id
"""  # noqa: S608
# $1 queue, $2 ids bigint[] (NULL: any), $3 limit: move messages the receive marked dying
# (`dead_at` set, see _RECEIVE_PICKED) to the dead letters, in one statement; returns the ids
# moved. A receive buries those it marked right after; listing or redriving a queue's dead
# letters first buries any left marked (their receive's process died in between). Marked rows
# are out of every claim (the claim indexes hold `dead_at IS NULL` only) and still hold their
# deduplication id, so nothing sees a message twice or not at all.
_BURY: Final = """
WITH chosen AS (
    SELECT id FROM ripple_queue_messages
    WHERE {which}
    FOR UPDATE SKIP LOCKED
), dying AS (
DELETE FROM ripple_queue_messages m USING chosen c
WHERE m.id = c.id
RETURNING m.id, m.queue, m.body, m.headers, m.group_id, m.deduplication_id, m.receive_count,
    m.created_at
), keys AS (
INSERT INTO ripple_queue_dead_keys (queue, deduplication_id, message_id, dead_at)
SELECT queue, deduplication_id, id, now() FROM dying WHERE deduplication_id IS NOT NULL
)
INSERT INTO ripple_queue_dead_letters (id, queue, body, headers, group_id, deduplication_id,
                                       receive_count, created_at, dead_at)
SELECT id, queue, body, headers, group_id, deduplication_id, receive_count, created_at, now()
FROM dying
RETURNING id
"""
BURY: Final = _BURY.format(
    which="""queue = $1 AND dead_at IS NOT NULL
          AND ($2::bigint[] IS NULL OR id = ANY($2::bigint[]))
    ORDER BY id LIMIT $3"""
)
# $1 seconds, $2 batch: messages of any queue marked dying longer ago than that, which a
# receiver that died between its two statements left behind.
BURY_STRAGGLERS: Final = _BURY.format(
    which="""dead_at IS NOT NULL AND dead_at < now() - make_interval(secs => $1)
    ORDER BY id LIMIT $2"""
)
# $1 queue, $2 receipts ("{id}.{receive count}") joined by ",", checked by the caller: one
# text, not a text[] (asyncpg checks every array element in Python). Deletes the messages
# they match; returns the receipts that matched.
ACK_RECEIPTS: Final = """
DELETE FROM ripple_queue_messages m
USING unnest(string_to_array($2::text, ',')) AS r(receipt)
WHERE m.id = split_part(r.receipt, '.', 1)::bigint AND m.queue = $1
    AND m.receive_count = split_part(r.receipt, '.', 2)::int AND m.dead_at IS NULL
RETURNING r.receipt
"""
# $1 queue, $2 id, $3 receive count, $4 seconds until visible again
SET_VISIBILITY: Final = """
UPDATE ripple_queue_messages SET visible_at = now() + make_interval(secs => $4)
WHERE id = $2 AND queue = $1 AND receive_count = $3 AND dead_at IS NULL
RETURNING id
"""
# $1 queue, $2 ids bigint[]: current receive counts (to explain a refused receipt)
SELECT_RECEIVE_COUNTS: Final = """
SELECT id, receive_count, dead_at IS NOT NULL AS dead FROM ripple_queue_messages
WHERE queue = $1 AND id = ANY($2::bigint[])
UNION ALL
SELECT id, receive_count, true AS dead FROM ripple_queue_dead_letters
WHERE queue = $1 AND id = ANY($2::bigint[])
"""
# $1 queue
PURGE: Final = "DELETE FROM ripple_queue_messages WHERE queue = $1"
PURGE_DEAD: Final = "DELETE FROM ripple_queue_dead_letters WHERE queue = $1"
PURGE_DEAD_KEYS: Final = "DELETE FROM ripple_queue_dead_keys WHERE queue = $1"
#: Most index entries of one kind of message (ready, later, grouped, dead) a count reads; a
#: count that reaches it is reported as a lower bound, so stats cost the same at any backlog.
STATS_CAP: Final = 10_000

# $1 queue, $2 cap: a queue's counts, each read through the partial index of its kind of
# message (each ORDER BY is its index's order, so the planner walks the index rather than
# scanning the table for the first $2 matches) and bounded (at most $2 entries each).
# "oldest" is the earliest send time among the first $2 ungrouped messages to become visible
# and the first $2 grouped ones.
STATS: Final = """
WITH ready AS (
    SELECT created_at FROM ripple_queue_messages
    WHERE queue = $1 AND dead_at IS NULL AND group_id IS NULL AND visible_at <= now()
    ORDER BY visible_at LIMIT $2
),
later AS (
    SELECT receive_count FROM ripple_queue_messages
    WHERE queue = $1 AND dead_at IS NULL AND group_id IS NULL AND visible_at > now()
    ORDER BY visible_at LIMIT $2
),
grouped AS (
    SELECT visible_at <= now() AS visible_now, receive_count, created_at
    FROM ripple_queue_messages
    WHERE queue = $1 AND dead_at IS NULL AND group_id IS NOT NULL
    ORDER BY group_id, id LIMIT $2
)
SELECT
    (SELECT count(*) FROM ready)::int AS ready,
    (SELECT count(*) FROM later)::int AS later_sampled,
    (SELECT count(*) FROM grouped)::int AS grouped_sampled,
    (SELECT count(*) FROM later WHERE receive_count > 0)::int AS later_received,
    (SELECT count(*) FROM later WHERE receive_count = 0)::int AS later_new,
    (SELECT count(*) FROM grouped WHERE visible_now)::int AS grouped_visible,
    (SELECT count(*) FROM grouped WHERE NOT visible_now AND receive_count > 0)::int
        AS grouped_received,
    (SELECT count(*) FROM grouped WHERE NOT visible_now AND receive_count = 0)::int
        AS grouped_new,
    (SELECT count(*) FROM (
        (SELECT 1 FROM ripple_queue_dead_letters WHERE queue = $1 LIMIT $2)
        UNION ALL
        (SELECT 1 FROM ripple_queue_messages WHERE queue = $1 AND dead_at IS NOT NULL
         ORDER BY id LIMIT $2)
    ) AS d)::int AS dead_letters,
    extract(epoch FROM now() - least(
        (SELECT min(created_at) FROM ready),
        (SELECT min(created_at) FROM grouped WHERE visible_now)
    ))::float8 AS oldest_age
"""
# $1 queue, $2 limit, $3 after id (0: from the start)
SELECT_DEAD: Final = """
SELECT id, body, headers, group_id, receive_count, dead_at, created_at
FROM ripple_queue_dead_letters
WHERE queue = $1 AND id > $3
ORDER BY id LIMIT $2
"""
# $1 queue, $2 ids bigint[] (NULL: all dead letters of the queue), $3 limit: moves them back
# into the queue under their own ids (so FIFO groups keep their order), fresh and visible now.
REDRIVE: Final = """
WITH chosen AS (
    SELECT id, dead_at FROM ripple_queue_dead_letters
    WHERE queue = $1 AND ($2::bigint[] IS NULL OR id = ANY($2::bigint[]))
    ORDER BY id LIMIT $3
    FOR UPDATE SKIP LOCKED
), moved AS (
    DELETE FROM ripple_queue_dead_letters d USING chosen c
    WHERE d.queue = $1 AND d.id = c.id AND d.dead_at = c.dead_at
    RETURNING d.id, d.queue, d.body, d.headers, d.group_id, d.deduplication_id, d.created_at
), keys AS (
    DELETE FROM ripple_queue_dead_keys k USING moved
    WHERE k.queue = moved.queue AND k.deduplication_id = moved.deduplication_id
)
INSERT INTO ripple_queue_messages (id, queue, body, headers, group_id, deduplication_id,
                                   created_at)
OVERRIDING SYSTEM VALUE
SELECT id, queue, body, headers, group_id, deduplication_id, created_at FROM moved
RETURNING id
"""
# $1 queue, $2 max receives
UPSERT_QUEUE: Final = """
INSERT INTO ripple_queues (name, max_receives) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET max_receives = EXCLUDED.max_receives, updated_at = now()
"""


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message that was received max_receives times without an ack."""

    id: str
    body: Any
    headers: dict[str, Any]
    group_id: str | None
    receive_count: int
    dead_at: datetime
    created_at: datetime

    @classmethod
    def from_row(cls, row: asyncpg.Record) -> DeadLetter:
        return cls(
            str(row["id"]),
            row["body"],
            row["headers"],
            row["group_id"],
            row["receive_count"],
            row["dead_at"],
            row["created_at"],
        )


@dataclass(frozen=True, slots=True)
class QueueStats:
    """A queue's counts now, each read from a bounded sample (`STATS_CAP` per kind of
    message): the counts named in `lower_bounds` reached it, so there may be more."""

    #: Messages waiting to be received now.
    visible: int
    #: Messages received and not yet acked (invisible until their timeout).
    in_flight: int
    #: Messages sent with a delay that are not visible yet.
    delayed: int
    dead_letters: int
    #: Seconds since the oldest visible message was sent (0 when none).
    oldest_age: float
    #: The counts (of visible, in_flight, delayed, dead_letters, depth) that are lower bounds.
    lower_bounds: frozenset[str] = frozenset()
    #: Most messages of one kind a count read.
    count_cap: int = STATS_CAP

    @property
    def depth(self) -> int:
        """Messages waiting or in flight (dead letters excluded)."""
        return self.visible + self.in_flight + self.delayed

    @classmethod
    def from_row(cls, row: asyncpg.Record, cap: int) -> QueueStats:
        bounds = set()
        if row["ready"] >= cap or row["grouped_sampled"] >= cap:
            bounds.add("visible")
        if row["later_sampled"] >= cap or row["grouped_sampled"] >= cap:
            bounds.update(("in_flight", "delayed"))
        if row["dead_letters"] >= cap:
            bounds.add("dead_letters")
        if bounds - {"dead_letters"}:
            bounds.add("depth")
        return cls(
            visible=row["ready"] + row["grouped_visible"],
            in_flight=row["later_received"] + row["grouped_received"],
            delayed=row["later_new"] + row["grouped_new"],
            dead_letters=row["dead_letters"],
            oldest_age=max(float(row["oldest_age"] or 0.0), 0.0),
            lower_bounds=frozenset(bounds),
            count_cap=cap,
        )


async def insert_messages(
    conn: Connection,
    queue: str,
    bodies: list[str],
    headers: list[str],
    group_ids: list[str | None],
    dedup_ids: list[str | None],
    delays: list[float],
) -> list[tuple[int, str | None]]:
    """Insert messages; (id, dedup id) of each inserted one (deduplicated ones are absent)."""
    # One JSON document, not five parallel arrays (asyncpg type-checks every array element).
    doc = [
        {"body": b, "headers": h, "group_id": g, "dedup": d, "delay": t}
        for b, h, g, d, t in zip(bodies, headers, group_ids, dedup_ids, delays, strict=True)
    ]
    rows = await conn.fetch(INSERT_MESSAGES, queue, doc)
    return [(row["id"], row["deduplication_id"]) for row in rows]


async def insert_bodies(conn: Connection, queue: str, bodies: str) -> list[str]:
    """Insert bare bodies (one JSON array text); the new ids in array order."""
    return [row[0] for row in await conn.fetch(INSERT_BODIES, queue, bodies)]


async def insert_fanout(
    conn: Connection,
    queues: list[str],
    bodies: list[str],
    topics: list[str],
    event_ids: list[str],
    dedup_ids: list[str],
    schema_versions: list[int | None] | None = None,
    *,
    fresh: bool = False,
) -> int:
    """Insert fan-out messages across queues; how many were new. `bodies` are JSON text
    (publish encoded each payload once; it is not decoded and encoded again here); each
    message's headers are its event's `topic` and `eventId`, and `schemaVersion` when the
    event was validated against a topic schema. `fresh`: every event was written by this
    transaction, so no message or dead letter can hold its deduplication ids yet."""
    # One JSON document, not five parallel arrays (asyncpg type-checks every array element).
    schemas = schema_versions if schema_versions is not None else [None] * len(queues)
    doc = [
        {"queue": q, "body": b, "topic": t, "event": e, "dedup": d, "schema": v}
        for q, b, t, e, d, v in zip(
            queues, bodies, topics, event_ids, dedup_ids, schemas, strict=True
        )
    ]
    status = await conn.execute(INSERT_FANOUT_FRESH if fresh else INSERT_FANOUT, doc)
    return int(status.rsplit(" ", 1)[-1])


async def find_by_dedup(conn: Connection, queue: str, dedup_ids: list[str]) -> dict[str, int]:
    rows = await conn.fetch(SELECT_BY_DEDUP, queue, dedup_ids)
    return {row["deduplication_id"]: row["id"] for row in rows}


async def claim_messages(
    conn: Connection,
    queue: str,
    limit: int,
    visibility: float,
    max_receives: int,
    *,
    fair: bool = False,
) -> list[asyncpg.Record]:
    """Claimed rows: CLAIM_MESSAGES's columns, read by position (a Record is already a
    tuple; wrapping each row in another object cost more than the rest of the claim's Python).
    `fair`: round robin across groups (CLAIM_FAIR), in turn order."""
    statement = CLAIM_FAIR if fair else CLAIM_MESSAGES
    return await conn.fetch(statement, queue, limit, visibility, max_receives)


async def bury(conn: Connection, queue: str, ids: list[int] | None, limit: int) -> list[int]:
    """Move messages marked dying (these `ids`, or any up to `limit`) to the dead letters
    (BURY); the ids moved."""
    return [row[0] for row in await conn.fetch(BURY, queue, ids, limit)]


class DeadLetterUpkeep:
    """The queue side of the sweeper (`ripple.platform.ops.ports.DeadLetterUpkeep`)."""

    async def bury_stragglers(self, conn: Connection, *, older_than: float, batch: int) -> int:
        """Move one batch of messages marked dying over `older_than` seconds ago, of any
        queue, to the dead letters; how many."""
        return len(await conn.fetch(BURY_STRAGGLERS, older_than, batch))


async def ack_receipts(conn: Connection, queue: str, receipts: str) -> set[str]:
    """Delete the messages these well-formed receipts (joined by ",") match; those that did."""
    return {row[0] for row in await conn.fetch(ACK_RECEIPTS, queue, receipts)}


async def set_visibility(
    conn: Connection, queue: str, message_id: int, receive_count: int, seconds: float
) -> bool:
    return (
        await conn.fetchval(SET_VISIBILITY, queue, message_id, receive_count, seconds) is not None
    )


async def receive_counts(
    conn: Connection, queue: str, ids: list[int]
) -> dict[int, tuple[int, bool]]:
    rows = await conn.fetch(SELECT_RECEIVE_COUNTS, queue, ids)
    return {row["id"]: (row["receive_count"], row["dead"]) for row in rows}


async def purge(conn: Connection, queue: str) -> int:
    """Delete the queue's messages and dead letters (in the caller's transaction); how many."""
    live = await conn.execute(PURGE, queue)
    dead = await conn.execute(PURGE_DEAD, queue)
    await conn.execute(PURGE_DEAD_KEYS, queue)
    return int(live.split()[-1]) + int(dead.split()[-1])


async def stats(conn: Connection, queue: str, cap: int) -> QueueStats:
    row = await conn.fetchrow(STATS, queue, cap)
    assert row is not None
    return QueueStats.from_row(row, cap)


async def dead_letters(conn: Connection, queue: str, limit: int, after: int) -> list[DeadLetter]:
    return [DeadLetter.from_row(row) for row in await conn.fetch(SELECT_DEAD, queue, limit, after)]


async def redrive(conn: Connection, queue: str, ids: list[int] | None, limit: int) -> int:
    return len(await conn.fetch(REDRIVE, queue, ids, limit))


async def set_max_receives(conn: Connection, queue: str, max_receives: int) -> None:
    await conn.execute(UPSERT_QUEUE, queue, max_receives)
