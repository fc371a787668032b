"""Time partitions of the event, webhook delivery, attempt and queue dead letter tables: created
ahead, retired whole.

The first three are range-partitioned by a UUIDv7 (an event by its id, a delivery by its id,
made in its event's millisecond, an attempt by its delivery's id), the dead letters by the time
they died (`dead_at`, migration 0029), each partition covering
`partition_interval` of time. pg_partman is not used (it is an extension many hosted and
packaged Postgres servers lack, and these tables need one statement per step): the sweeper
keeps `partitions_ahead` partitions created ahead of now, and a publisher makes sure the
partition of the id it is about to write exists before it writes (`cover`), so a publish never
meets a missing partition even when no sweeper ran for a week. There is no DEFAULT partition:
`DETACH ... CONCURRENTLY` refuses a table that has one.

Retention detaches (`CONCURRENTLY`: writers are not blocked) and drops each partition whose
whole range is older than `event_retention_days`, unless it is held: a webhook delivery
partition with a delivery still pending (a paused subscription's backlog) is kept, with the
attempt partition of the same range. Events outlive their retention by up to one interval.
The idempotency keys of events go with their partition. Dead letters are retired the same way
after `dead_letter_retention_days`, and their deduplication ids with them; a receive that
finds no partition for a dead letter of now creates them (`ensure`) and moves it again.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ripple.platform.core import db
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool
from ripple.platform.core.logs import get_logger
from ripple.platform.ops import partition_store, sweeper_store

__all__ = ["Partitions"]

log = get_logger("ripple.partitions")

#: The sweeper's `kind` of each managed table's rows.
_KINDS = {
    "ripple_events": "events",
    "ripple_webhook_deliveries": "webhook_deliveries",
    "ripple_webhook_attempts": "webhook_attempts",
    "ripple_queue_dead_letters": "queue_dead_letters",
}
#: The table whose retention is `dead_letter_retention` rather than the events'.
_DEAD_LETTERS = "ripple_queue_dead_letters"
#: Waiting longer than this for a lock to create partitions fails the attempt (the next sweep
#: or publish tries again) rather than queueing writers behind it.
_LOCK_TIMEOUT = "10s"


class Partitions:
    """Creates partitions ahead and retires expired ones.

    Args:
        pool: the database.
        settings: `partition_interval`, `partitions_ahead`.
    """

    def __init__(self, pool: Pool, settings: Settings) -> None:
        self._pool = pool
        self._interval = settings.partition_interval
        self._ahead = settings.partitions_ahead
        #: The soonest time some table has no partition for, as last read (None: not yet).
        self._horizon: datetime | None = None

    async def ensure(self, at: datetime | None = None) -> int:
        """Create the partitions missing up to `partitions_ahead` intervals past now (or past
        `at`, if later); return how many were created."""
        now = datetime.now(UTC)
        upto = max(now, at or now) + timedelta(seconds=self._interval * self._ahead)
        async with db.transaction(self._pool) as conn:
            await conn.execute(f"SET LOCAL lock_timeout = '{_LOCK_TIMEOUT}'")
            made = await partition_store.ensure(conn, self._interval, upto)
            self._horizon = await partition_store.horizon(conn)
        if made:
            log.info("partitions_created", count=made, horizon=str(self._horizon))
        return made

    async def cover(self, at: datetime) -> None:
        """Make sure ids made at `at` have their partitions, creating them when `at` is less
        than one interval before the last partition's end. Cheap when they exist: the bound
        is read once per process, then compared."""
        margin = timedelta(seconds=self._interval)
        if self._horizon is None:
            async with self._pool.acquire() as conn:
                self._horizon = await partition_store.horizon(conn)
        if self._horizon is None or at + margin >= self._horizon:
            await self.ensure(at)

    async def retire(
        self, retention: float, batch: int, dead_letter_retention: float | None = None
    ) -> dict[str, int]:
        """Detach and drop every unheld partition older than `retention` seconds (dead letters:
        `dead_letter_retention`, default `retention`), then the idempotency keys of the events
        and the deduplication ids of the dead letters dropped; rows retired per sweeper kind."""
        counts = dict.fromkeys(_KINDS.values(), 0)
        own = {} if dead_letter_retention is None else {_DEAD_LETTERS: dead_letter_retention}
        async with self._pool.acquire() as conn:
            for part in await partition_store.expired(conn, retention, own):
                if await partition_store.is_held(conn, part):
                    continue
                rows = await partition_store.count_rows(conn, part.name)
                # CONCURRENTLY runs outside a transaction; the drop and the bookkeeping in one.
                await partition_store.detach(conn, part)
                async with conn.transaction():
                    await partition_store.drop(conn, part.name)
                counts[_KINDS.get(part.parent, part.parent)] += rows
                log.info("partition_dropped", partition=part.name, rows=rows)
            # The keys of what the tables no longer hold (older than their oldest partition).
            for parent, delete_keys in (
                ("ripple_events", sweeper_store.delete_event_keys_before),
                (_DEAD_LETTERS, sweeper_store.delete_dead_keys_before),
            ):
                oldest = await partition_store.lowest_bound(conn, parent)
                while oldest is not None:
                    if await delete_keys(conn, oldest, batch) < batch:
                        break
        return counts
