"""Writes publishes: the event rows, their fan-out and wait resolution, many events per commit.

`write_events` writes a batch of events in the caller's transaction with a few statements per
batch (one insert for all events, one per batch-capable kind, one wait probe). `GroupCommitter`
collects concurrent publishes that own no transaction and commits them together (group
commit), falling back to one transaction per event when a batch fails, so one bad event fails
alone. Knows no subscriber kind: each kind's `fan_out` writes a whole batch at once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ripple.platform.core import db
from ripple.platform.core.group_commit import GroupCommit
from ripple.platform.core.logs import get_logger
from ripple.platform.events import event_store
from ripple.platform.events.fanout import (
    EventWaitResolver,
    PublishedEvent,
    SubscriptionRow,
    TargetKind,
)
from ripple.platform.ops import metrics

__all__ = [
    "GroupCommitter",
    "PendingEvent",
    "WrittenEvent",
    "count_written",
    "write_events",
]

log = get_logger("ripple.publish")

#: Most events one group commit writes.
MAX_GROUP: Final = 200
#: Group commits in flight at once (each holds one pooled connection).
MAX_FLUSHERS: Final = 3
#: Events waiting that start a second (third) group commit while one is in flight. A group
#: commit costs a few round trips and BEGIN/COMMIT whatever its size: under REST load starting
#: one for every arrival made small groups that cost `ripple serve` and Postgres more CPU per
#: publish than waiting for the group in flight. A big backlog still gets parallel transactions.
MIN_SPILL: Final = 16


@dataclass(slots=True)
class PendingEvent:
    """A validated event waiting to be written."""

    event_id: str
    topic: str
    payload: Any
    #: `payload` as compact JSON text, encoded once when it was validated.
    payload_json: str
    idempotency_key: str | None
    trace: dict[str, str] | None
    #: Matching active subscriptions whose filter the payload satisfies, by kind (shared
    #: between events of a topic: read only).
    by_kind: Mapping[str, Sequence[SubscriptionRow]]
    #: The subscription-set version `by_kind` was matched against (stored with the event).
    subscriptions_version: int | None = None
    #: The topic schema version the payload was validated against (None: no schema).
    schema_version: int | None = None
    #: The CloudEvents context attributes of an ingested CloudEvent (stored with the event).
    cloudevent: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class WrittenEvent:
    """The outcome of writing one event."""

    event_id: str
    deliveries: int
    duplicate: bool
    waits: int
    event: PublishedEvent | None
    by_kind: Mapping[str, Sequence[SubscriptionRow]] = field(default_factory=dict)
    #: Deliveries written, by kind (for the metrics counted once the commit is known).
    created: dict[str, int] = field(default_factory=dict)


async def write_events(
    conn: db.Connection,
    items: Sequence[PendingEvent],
    kinds: Mapping[str, TargetKind],
    resolver: EventWaitResolver | None,
) -> list[WrittenEvent]:
    """Write `items` in the caller's transaction; outcomes in order. Counts no metric: the
    caller does (`count_written`) once the transaction is known to commit."""
    inserted = await event_store.insert_events(
        conn,
        [i.event_id for i in items],
        [i.topic for i in items],
        [i.payload_json for i in items],
        [i.idempotency_key for i in items],
        [i.trace for i in items],
        [i.subscriptions_version for i in items],
        [i.schema_version for i in items],
        [i.cloudevent for i in items],
    )
    firsts: dict[str, str] = {}
    dup_keys = [k for i in items if i.event_id not in inserted and (k := i.idempotency_key)]
    if dup_keys:
        firsts = await event_store.find_events_by_keys(conn, dup_keys)
    new = [i for i in items if i.event_id in inserted]
    events = {
        i.event_id: PublishedEvent(
            i.event_id,
            i.topic,
            i.payload,
            inserted[i.event_id][0],
            i.trace,
            payload_json=i.payload_json,
            schema_version=i.schema_version,
            fresh=True,
        )
        for i in new
    }
    counts: dict[str, dict[str, int]] = {i.event_id: {} for i in new}
    for kind_name in sorted({k for i in new for k, rows in i.by_kind.items() if rows}):
        work = [(events[i.event_id], i.by_kind[kind_name]) for i in new if i.by_kind.get(kind_name)]
        written = await kinds[kind_name].fan_out(conn, work)
        for (event, _), n in zip(work, written, strict=True):
            counts[event.event_id][kind_name] = n
    waits: dict[str, int] = {}
    if resolver is not None:
        for item in new:
            if inserted[item.event_id][1]:  # some wait listens to this topic
                waits[item.event_id] = await resolver.resolve_event_waits(
                    conn, item.topic, item.payload
                )
    out = []
    for item in items:
        if item.event_id in events:
            created = counts[item.event_id]
            out.append(
                WrittenEvent(
                    item.event_id,
                    sum(created.values()),
                    False,
                    waits.get(item.event_id, 0),
                    events[item.event_id],
                    item.by_kind,
                    created,
                )
            )
        else:
            first = firsts.get(item.idempotency_key or "", item.event_id)
            out.append(WrittenEvent(first, 0, True, 0, None))
    return out


def count_written(written: Sequence[WrittenEvent], kinds: Mapping[str, TargetKind]) -> None:
    """Metrics for written events: call once their transaction committed (or, in a caller's
    transaction, once it is handed back), so a rolled-back or retried group counts nothing.
    Each kind counts its own (`TargetKind.count_committed`: runs started, by workflow)."""
    published: Counter[str] = Counter()
    created: Counter[str] = Counter()
    per_kind: dict[str, list[tuple[Sequence[SubscriptionRow], int]]] = {}
    for outcome in written:
        if outcome.event is None:
            continue
        published[metrics.topic_prefix(outcome.event.topic)] += 1
        for kind_name, n in outcome.created.items():  # Counter.update is slower per call
            created[kind_name] += n
        for kind_name, rows in outcome.by_kind.items():
            if rows:
                per_kind.setdefault(kind_name, []).append((rows, outcome.created.get(kind_name, 0)))
    for prefix, n in published.items():
        metrics.EVENTS_PUBLISHED.labels(prefix).inc(n)
    for kind_name, n in created.items():
        if n:
            metrics.DELIVERIES.labels(kind_name, "created").inc(n)
    for kind_name, kind_written in per_kind.items():
        try:
            kinds[kind_name].count_committed(kind_written)
        except Exception:  # counting never fails a committed publish
            log.exception("count_committed_failed", kind=kind_name)


class GroupCommitter:
    """Commits concurrent publishes together: one transaction (and one WAL flush) per group
    (`GroupCommit`: a publish waits only for the group in flight ahead of it; with no
    concurrency each publish is its own group, so latency does not grow when idle; a group
    that fails is retried event by event, so one bad event fails alone)."""

    def __init__(
        self,
        pool: db.Pool,
        kinds: Mapping[str, TargetKind],
        resolver: EventWaitResolver | None,
        after_commit: Callable[[Sequence[WrittenEvent]], None],
    ) -> None:
        self._pool = pool
        self._kinds = kinds
        self._resolver = resolver
        self._after_commit = after_commit
        self._group: GroupCommit[PendingEvent, WrittenEvent] = GroupCommit(
            self._write,
            name="ripple-publish-commit",
            max_batch=MAX_GROUP,
            flushers=MAX_FLUSHERS,
            spill=MIN_SPILL,
            refused_event="publish_group_failed",
        )

    async def submit(self, item: PendingEvent, *, timeout: float | None = None) -> WrittenEvent:
        """Write `item` with the next group; `Unavailable` after `timeout` seconds."""
        return await self._group.submit(item, timeout=timeout)

    async def _write(self, group: list[PendingEvent]) -> list[WrittenEvent]:
        async with db.transaction(self._pool) as conn:
            written = await write_events(conn, group, self._kinds, self._resolver)
        try:
            count_written(written, self._kinds)
            self._after_commit(written)
        except Exception:  # hints never fail a committed publish
            log.exception("after_commit_failed")
        return written
