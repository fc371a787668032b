"""Backfills and replays: deliver retained events to one subscription after the fact.

A backfill gives a new subscription the retained events published since a time, then it
continues live. The live boundary is exact: every event records the subscription-set version
its publisher matched it against (see `Subscriptions.targets_at`), and the subscription was
created at version V, so the events tagged >= V were matched with it live and the rest are the
backfill's. Those can still be committed for a moment after the subscription is (a publisher
whose cache predates it), so the backfill waits until every cache has been re-checked (the poll
interval), then takes its last batch under a SHARE lock on the events table, which waits for
the publishes in flight. A ledger of delivered event ids makes each batch skip what an earlier
one delivered, in whatever order concurrent publishes committed. One transaction per batch;
progress is on the subscription row.

A replay re-delivers the retained events of a time range to one subscription: same event ids,
new deliveries (kinds key them by the replay id). Knows no subscriber kind (`TargetKind`s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ripple.platform.access import audit_store
from ripple.platform.core import db
from ripple.platform.core.config import Settings
from ripple.platform.core.ids import new_id
from ripple.platform.core.logs import get_logger
from ripple.platform.errors import InvalidInput, NotFound
from ripple.platform.events import backfill_store
from ripple.platform.events.fanout import PublishedEvent, SubscriptionRow, TargetKind
from ripple.platform.events.topics import compile_pattern

__all__ = ["Backfills", "check_retained"]

log = get_logger("ripple.backfill")

#: Events one backfill or replay batch (one transaction) delivers.
BATCH: Final = 1000
#: Added to the poll interval before the last batch (clock skew, a publish in flight).
SETTLE_MARGIN: Final = 0.5


def check_retained(since: datetime, settings: Settings, field: str = "since") -> datetime:
    """`since` as an aware datetime; InvalidInput when it is older than the event retention."""
    if not isinstance(since, datetime):
        raise InvalidInput(f"{field} must be a datetime", field=field)
    when = since.replace(tzinfo=UTC) if since.tzinfo is None else since
    oldest = datetime.now(UTC) - timedelta(days=settings.event_retention_days)
    if when < oldest:
        raise InvalidInput(
            f"{field} {when.isoformat()} is older than the event retention: events are retained "
            f"for {settings.event_retention_days:g} days (RIPPLE_EVENT_RETENTION_DAYS), so the "
            f"oldest that can be delivered is from {oldest.isoformat(timespec='seconds')}; "
            "pass a later time",
            field=field,
        )
    return when


def _matcher(pattern: str) -> tuple[str | None, str | None]:
    """(exact topic, None) or (None, a Postgres regex over '.' + topic) for `pattern`."""
    compiled = compile_pattern(pattern)
    if compiled.regex is None:
        return pattern, None
    # The Python regex uses only classes, escapes of [a-z0-9_-] and (?:...)*, which Postgres
    # regular expressions read the same way.
    return None, "^" + compiled.regex.pattern + "$"


class Backfills:
    """Runs backfills and replays for subscriptions.

    Args:
        pool: the database pool.
        settings: poll interval (the live boundary) and event retention.
        kinds: target kinds by `type`.
    """

    def __init__(self, pool: db.Pool, settings: Settings, kinds: Mapping[str, TargetKind]) -> None:
        self._pool = pool
        self._settings = settings
        self._kinds = kinds

    async def _deliver(
        self, conn: db.Connection, kind: TargetKind, row: SubscriptionRow, events: list[Any]
    ) -> None:
        work: list[tuple[PublishedEvent, Sequence[SubscriptionRow]]] = [
            (event, [row]) for event in events
        ]
        await kind.fan_out(conn, work)

    def _after_commit(self, kind: TargetKind, row: SubscriptionRow, event: PublishedEvent) -> None:
        try:
            kind.after_commit(event, [row])
        except Exception:  # a hint never fails a committed batch
            log.exception("after_commit_failed", kind=kind.kind)

    # -- backfill -----------------------------------------------------------------------------

    async def _backfill_batch(self, subscription_id: str, *, final: bool) -> tuple[int, bool]:
        """One batch in one transaction: (events delivered, whether more may be waiting).

        `final`: the batch under the events lock that completes the backfill.
        """
        async with db.transaction(self._pool) as conn:
            state = await backfill_store.lock_backfill(conn, subscription_id)
            if state is None:
                raise NotFound(f"no subscription {subscription_id!r}")
            if state["backfill_since"] is None or state["backfill_done_at"] is not None:
                return 0, False
            if final:
                await backfill_store.lock_events(conn)
            kind = self._kinds[state["kind"]]
            row = SubscriptionRow(subscription_id, state["pattern"], state["kind"], state["target"])
            exact, regex = _matcher(state["pattern"])
            cursor = None
            if state["backfill_cursor_at"] is not None:
                cursor = (state["backfill_cursor_at"], state["backfill_cursor_id"])
            delivered = 0
            last: PublishedEvent | None = None
            while True:
                # Normal batches walk the cursor; the final pass delivers what the walk did not
                # (an event committed late with an older timestamp), found through the ledger.
                events = await backfill_store.next_backfill_events(
                    conn,
                    subscription_id,
                    state["backfill_since"],
                    state["backfill_version"],
                    exact,
                    regex,
                    state["filter"],
                    BATCH,
                    cursor=cursor,
                    missed=final,
                )
                if events:
                    await self._deliver(conn, kind, row, events)
                    await backfill_store.mark_backfilled(
                        conn, subscription_id, events, advance=not final
                    )
                    delivered += len(events)
                    last = events[-1]
                if not final or len(events) < BATCH:
                    break
            if final:
                await backfill_store.finish_backfill(conn, subscription_id)
        if last is not None:
            self._after_commit(kind, row, last)
        return delivered, (not final and delivered == BATCH)

    async def _settle_delay(self, subscription_id: str) -> float:
        """Seconds until every process has re-checked its subscription cache since the
        subscription was created (after that no publish can match without it)."""
        async with db.transaction(self._pool) as conn:
            state = await backfill_store.lock_backfill(conn, subscription_id)
        if state is None:
            raise NotFound(f"no subscription {subscription_id!r}")
        ready = state["created_at"] + timedelta(
            seconds=self._settings.poll_interval + SETTLE_MARGIN
        )
        delay: float = (ready - state["db_now"]).total_seconds()
        return max(0.0, delay)

    async def run_backfill(self, subscription_id: str) -> int:
        """Deliver the subscription's backfill to completion (resumes one that was cut short);
        returns how many events this call delivered."""
        total = 0
        more = True
        while more:
            count, more = await self._backfill_batch(subscription_id, final=False)
            total += count
        # Waiting here is the protocol, not synchronisation: publishers may match against a
        # cache older than the subscription until they re-check it (at most the poll interval).
        await asyncio.sleep(await self._settle_delay(subscription_id))
        more = True
        while more:  # what arrived meanwhile, without holding the lock
            count, more = await self._backfill_batch(subscription_id, final=False)
            total += count
        count, _ = await self._backfill_batch(subscription_id, final=True)
        total += count
        log.info("backfill_done", subscription_id=subscription_id, delivered=total)
        return total

    # -- replay -------------------------------------------------------------------------------

    async def replay(
        self, subscription: Any, since: datetime, until: datetime | None = None
    ) -> int:
        """Re-deliver the retained events created in [since, until) that match `subscription`
        (a `SubscriptionRecord`); returns how many. One transaction per batch."""
        since = check_retained(since, self._settings)
        if until is None:
            end = datetime.now(UTC)
        elif isinstance(until, datetime):
            end = until.replace(tzinfo=UTC) if until.tzinfo is None else until
        else:
            raise InvalidInput("until must be a datetime", field="until")
        if end <= since:
            raise InvalidInput("until must be later than since", field="until")
        kind = self._kinds[subscription.kind]
        row = SubscriptionRow(subscription.id, subscription.pattern, kind.kind, subscription.target)
        exact, regex = _matcher(subscription.pattern)
        replay_id = new_id()
        cursor: tuple[datetime, str] | None = None
        total = 0
        audit_id: str | None = None
        while True:
            async with db.transaction(self._pool) as conn:
                events = await backfill_store.next_replay_events(
                    conn, BATCH, since, end, cursor, exact, regex, subscription.filter, replay_id
                )
                if events:
                    await self._deliver(conn, kind, row, events)
                # One audit row per replay, written with the first batch; each later batch
                # adds its events to the row's count in its own transaction.
                if audit_id is None:
                    details = {
                        "since": since.isoformat(),
                        "until": end.isoformat(),
                        "replay_id": replay_id,
                        "count": len(events),
                    }
                    audit_id = await audit_store.record(
                        conn, "subscription.replay", subscription.id, details
                    )
                elif events:
                    await audit_store.add_to_count(conn, audit_id, len(events))
            if not events:
                break
            total += len(events)
            cursor = (events[-1].created_at, events[-1].event_id)
            self._after_commit(kind, row, events[-1])
            if len(events) < BATCH:
                break
        log.info(
            "events_replayed", subscription_id=subscription.id, replay_id=replay_id, count=total
        )
        return total
