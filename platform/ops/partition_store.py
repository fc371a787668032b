"""SQL of the time partitions of the event, webhook delivery, attempt and queue dead letter
tables: the bookkeeping (`ripple_partitions`, `ripple_partitioned_tables`, migrations
0027-0029), creation
ahead (the SQL function `ripple_partitions_ensure`) and the DDL that retires a partition.
Partition and table names come from the bookkeeping, never from input, and are quoted by
Postgres's `format('%I')`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from ripple.platform.core.db import Connection

__all__ = [
    "Partition",
    "count_rows",
    "detach",
    "drop",
    "ensure",
    "expired",
    "horizon",
    "id_span",
    "is_held",
    "lowest_bound",
]

# $1 interval (seconds), $2 up to (timestamptz): create the partitions missing up to then.
ENSURE: Final = "SELECT ripple_partitions_ensure(make_interval(secs => $1), $2)"

# The soonest time some managed table has no partition for.
SELECT_HORIZON: Final = """
SELECT min(upper) FROM (
    SELECT max(p.upper) AS upper FROM ripple_partitions p GROUP BY p.parent
) AS newest
"""

# $1 retention (seconds), $2 {parent: retention (seconds)} for tables retained otherwise:
# partitions whose whole range is older than their table's retention, oldest first, in the
# managed tables' order (so a followed table's partition is decided first).
SELECT_EXPIRED: Final = """
SELECT p.name, p.parent, p.upper, t.hold, t.follows
FROM ripple_partitions p JOIN ripple_partitioned_tables t ON t.parent = p.parent
WHERE p.upper <= now() - make_interval(secs => coalesce(($2::jsonb ->> p.parent)::float8, $1))
ORDER BY p.upper, t.position
"""

# $1 parent, $2 upper bound: whether that table has a partition ending there.
SELECT_HAS_PARTITION: Final = """
SELECT EXISTS (SELECT 1 FROM ripple_partitions WHERE parent = $1 AND upper = $2)
"""

# $1 partition name, $2 the managed table's hold predicate: the statement testing whether any
# row of the partition is held (the predicate is the bookkeeping's own text).
FORMAT_HELD: Final = (
    "SELECT format('SELECT EXISTS (SELECT 1 FROM %I WHERE ' || $2::text || ')', $1::text)"
)
FORMAT_COUNT: Final = "SELECT format('SELECT count(*) FROM %I', $1::text)"
# $1 parent, $2 partition: DETACH ... CONCURRENTLY (outside a transaction), or FINALIZE when an
# earlier detach was interrupted.
FORMAT_DETACH: Final = (
    "SELECT format('ALTER TABLE %I DETACH PARTITION %I ' "
    "|| CASE WHEN $3::boolean THEN 'FINALIZE' ELSE 'CONCURRENTLY' END, $1::text, $2::text)"
)
FORMAT_DROP: Final = "SELECT format('DROP TABLE IF EXISTS %I', $1::text)"
# $1 partition: whether it is attached, and whether a concurrent detach of it is pending.
SELECT_ATTACHED: Final = """
SELECT i.inhdetachpending FROM pg_inherits i
WHERE i.inhrelid = to_regclass($1)
"""
DELETE_PARTITION: Final = "DELETE FROM ripple_partitions WHERE name = $1"
# $1 parent, $2 from, $3 to (timestamptz): the ids bounding the partitions of `parent` that
# hold ids made in [from, to): the lower bound of the partition `from` falls in (NULL: it has
# none, or none holds `from`) and the upper bound of the one `to` falls in (NULL: past the
# newest).
SELECT_ID_SPAN: Final = """
SELECT (SELECT CASE WHEN lower > '-infinity' THEN ripple_uuid7_floor(lower)::text END
        FROM ripple_partitions WHERE parent = $1 AND lower <= $2
        ORDER BY lower DESC LIMIT 1),
       (SELECT ripple_uuid7_floor(upper)::text
        FROM ripple_partitions WHERE parent = $1 AND upper > $3
        ORDER BY upper LIMIT 1)
"""
# $1 parent: the lower bound of its oldest partition (NULL while it has no lower bound)
SELECT_LOWEST_BOUND: Final = """
SELECT CASE WHEN min(lower) > '-infinity' THEN min(lower) END
FROM ripple_partitions WHERE parent = $1
"""


@dataclass(frozen=True, slots=True)
class Partition:
    name: str
    parent: str
    upper: datetime
    #: SQL predicate of a held row, or None.
    hold: str | None
    #: The table whose partition over the same range keeps this one, or None.
    follows: str | None


async def ensure(conn: Connection, interval: float, upto: datetime) -> int:
    """Create the partitions missing up to `upto`, `interval` seconds each; how many."""
    return int(await conn.fetchval(ENSURE, interval, upto))


async def horizon(conn: Connection) -> datetime | None:
    """The soonest upper bound of a managed table's newest partition."""
    found: datetime | None = await conn.fetchval(SELECT_HORIZON)
    return found


async def expired(
    conn: Connection, retention: float, retentions: Mapping[str, float] | None = None
) -> list[Partition]:
    """Partitions past `retention` seconds, or past their table's own in `retentions`."""
    rows = await conn.fetch(SELECT_EXPIRED, retention, dict(retentions or {}))
    return [Partition(*row) for row in rows]


async def is_held(conn: Connection, part: Partition) -> bool:
    """Whether retention must keep `part`: a held row, or the partition it follows is kept."""
    if part.follows is not None and await conn.fetchval(
        SELECT_HAS_PARTITION, part.follows, part.upper
    ):
        return True
    if part.hold is None:
        return False
    return bool(await conn.fetchval(await conn.fetchval(FORMAT_HELD, part.name, part.hold)))


async def count_rows(conn: Connection, name: str) -> int:
    return int(await conn.fetchval(await conn.fetchval(FORMAT_COUNT, name)))


async def detach(conn: Connection, part: Partition) -> None:
    """Detach `part` from its table without blocking its writers (`CONCURRENTLY`); run it
    outside a transaction. Finishes an interrupted detach; a detached one is left as is."""
    row = await conn.fetchrow(SELECT_ATTACHED, part.name)
    if row is None:
        return
    statement = await conn.fetchval(FORMAT_DETACH, part.parent, part.name, bool(row[0]))
    await conn.execute(statement)


async def drop(conn: Connection, name: str) -> None:
    """Drop a detached partition and forget it (in the caller's transaction)."""
    await conn.execute(await conn.fetchval(FORMAT_DROP, name))
    await conn.execute(DELETE_PARTITION, name)


async def id_span(
    conn: Connection, parent: str, start: datetime, end: datetime
) -> tuple[str | None, str | None]:
    """The lowest id of the partition holding ids made at `start` and the id past the one
    holding those made at `end` (None: unbounded that way): partition bounds, so every id made
    in `[start, end)` lies between them and no partition outside is left between them."""
    row = await conn.fetchrow(SELECT_ID_SPAN, parent, start, end)
    assert row is not None
    return row[0], row[1]


async def lowest_bound(conn: Connection, parent: str) -> datetime | None:
    """The earliest time `parent`'s partitions cover; None if the oldest has no lower bound."""
    found: datetime | None = await conn.fetchval(SELECT_LOWEST_BOUND, parent)
    return found
