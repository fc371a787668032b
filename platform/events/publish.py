"""`Publisher`: publish an event and fan it out in ONE transaction; `explain` as a dry run.

One transaction writes the event, one delivery row per matching active subscription (through
each kind's `fan_out`), and the resolution of matching workflow waits; hints follow the commit.
With a caller's connection the whole publish joins the caller's transaction (transactional
outbox); without one, concurrent publishes share a transaction (group commit, see
`publish_writer`), each still all-or-nothing. Knows no subscriber kind (kinds are handed in
through `TargetKind`); reads the workflow waits table only to probe and explain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from ripple.platform.core import db, wake
from ripple.platform.core.commit_watch import CommitWatch
from ripple.platform.core.config import Settings
from ripple.platform.core.deadlines import Deadline
from ripple.platform.core.ids import check_idempotency_key, id_time, new_id
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import NullWaker, RunReady
from ripple.platform.errors import InvalidInput
from ripple.platform.events.contracts.validation import Contracts
from ripple.platform.events.fanout import (
    EventWaitResolver,
    PublishedEvent,
    SubscriptionRow,
    TargetKind,
)
from ripple.platform.events.publish_writer import (
    GroupCommitter,
    PendingEvent,
    WrittenEvent,
    count_written,
    write_events,
)
from ripple.platform.events.subscriptions import CompiledSubscription, Subscriptions
from ripple.platform.events.topics import contains, encode_json, first_mismatch, validate_topic
from ripple.platform.ops import tracing
from ripple.platform.ops.partitions import Partitions

__all__ = ["Explanation", "PublishResult", "Publisher", "SubscriptionVerdict"]

log = get_logger("ripple.publish")


@dataclass(frozen=True, slots=True)
class PublishResult:
    """What `publish` did."""

    #: The event's id (the first event's id when the idempotency key was seen before).
    event_id: str
    #: Delivery rows written (queue messages, webhook deliveries, workflow runs).
    deliveries: int
    #: True when the idempotency key was seen before: nothing was written.
    duplicate: bool = False
    #: Workflow waits this event resolved.
    waits_resolved: int = 0


@dataclass(frozen=True, slots=True)
class SubscriptionVerdict:
    """Whether one subscription would receive an event, and why not."""

    subscription_id: str
    pattern: str
    kind: str
    target: dict[str, Any]
    status: str
    matched: bool
    #: None when matched; else e.g. "pattern does not match", "filter mismatch at 'plan'".
    reason: str | None


@dataclass(frozen=True, slots=True)
class Explanation:
    """A dry run of `publish(topic, payload)`: nothing is written."""

    topic: str
    subscriptions: list[SubscriptionVerdict] = field(default_factory=list)
    #: Workflow runs whose waits would resolve.
    waits: int = 0
    #: Ids of the runs whose waits would resolve (when known).
    wait_run_ids: list[str] = field(default_factory=list)
    #: The topic schema version the payload was validated against (None: the topic has none).
    schema_version: int | None = None

    @property
    def matched(self) -> list[SubscriptionVerdict]:
        return [v for v in self.subscriptions if v.matched]


class Publisher:
    """Publishes events with their fan-out.

    Args:
        pool: the database pool.
        waker: wake layer for after-commit hints.
        settings: JSON limits.
        subscriptions: the compiled subscription set.
        kinds: target kinds by `type`.
        wait_resolver: resolves workflow waits in the publish transaction (optional).
        contracts: topic schemas every payload is validated against first (optional).
    """

    def __init__(
        self,
        pool: db.Pool,
        waker: NullWaker,
        settings: Settings,
        subscriptions: Subscriptions,
        kinds: Mapping[str, TargetKind],
        wait_resolver: EventWaitResolver | None = None,
        contracts: Contracts | None = None,
    ) -> None:
        self._pool = pool
        self._contracts = contracts
        self._waker = waker
        self._settings = settings
        self._subscriptions = subscriptions
        self._kinds = kinds
        self._resolver = wait_resolver
        self._committer = GroupCommitter(pool, kinds, wait_resolver, self._after_commit)
        #: The event's time partition must exist before it is written (no DEFAULT partition).
        self.partitions = Partitions(pool, settings)
        #: Counts what a publish in a caller's transaction wrote once that transaction commits.
        self.commit_watch = CommitWatch(pool)

    def _validate(self, topic: str, payload: Any, idempotency_key: str | None) -> str:
        """Check the publish's arguments; the payload as compact JSON text (encoded once, and
        that text is what every row of the publish stores)."""
        validate_topic(topic)
        if payload is None:
            raise InvalidInput(
                "payload must be JSON, not None; publish {} for no data", field="payload"
            )
        text = encode_json(
            payload,
            field="payload",
            max_depth=self._settings.max_json_depth,
            max_bytes=self._settings.max_body_bytes,
        )
        check_idempotency_key(idempotency_key, field="idempotency_key")
        return text

    async def publish(
        self,
        topic: str,
        payload: Any,
        idempotency_key: str | None = None,
        *,
        conn: db.Connection | None = None,
        cloudevent: dict[str, Any] | None = None,
    ) -> PublishResult:
        """Write the event and its deliveries in one transaction (the caller's, with `conn`).

        A repeated `idempotency_key` returns the first event's id and writes nothing. When the
        topic has a schema, `payload` (also a pydantic model instance) is validated against its
        latest version first: `InvalidInput` naming each violation's JSON pointer.
        `cloudevent`: the CloudEvents context attributes it was ingested with, kept with it.
        """
        if isinstance(payload, BaseModel):
            payload = payload.model_dump(mode="json", by_alias=True)
        text = self._validate(topic, payload, idempotency_key)
        deadline = Deadline(self._settings.db_timeout)
        schema_version = None
        if self._contracts is not None:
            schema_version = await self._contracts.check(topic, payload, deadline, text=text)
        targets, version = await self._subscriptions.targets_at(topic, payload, deadline)
        event_id = new_id()
        await self.partitions.cover(id_time(event_id))
        item = PendingEvent(
            event_id,
            topic,
            payload,
            text,
            idempotency_key,
            None,
            targets,
            version,
            schema_version=schema_version,
            cloudevent=cloudevent,
        )
        if not tracing.recording():  # no tracer provider: no span, no context to store
            written = await self._write(item, conn, deadline)
        else:
            with tracing.span("event.publish", topic=topic, event_id=item.event_id):
                # Captured inside the span: what targets store is this publish's own context,
                # so their spans (workflow.run, webhook.deliver) join the publisher's trace.
                item.trace = tracing.current_context()
                written = await self._write(item, conn, deadline)
        if written.duplicate:
            log.info("event_duplicate", event_id=written.event_id, idempotency_key=idempotency_key)
        return PublishResult(written.event_id, written.deliveries, written.duplicate, written.waits)

    async def _write(
        self, item: PendingEvent, conn: db.Connection | None, deadline: Deadline
    ) -> WrittenEvent:
        if conn is None:
            # Counted and hinted by the group commit, once the group committed.
            return await self._committer.submit(item, timeout=deadline.left())
        async with db.transaction(self._pool, conn) as tx:
            (written,) = await write_events(tx, [item], self._kinds, self._resolver)
        # The caller commits later: hint now and again shortly; counted once it committed.
        wake.hint_around_caller_commit(lambda: self._after_commit([written]))
        await self.commit_watch.after_caller_commit(
            conn, lambda: count_written([written], self._kinds)
        )
        return written

    def _after_commit(self, written: Sequence[WrittenEvent]) -> None:
        """Hints for committed events: each kind once per group, RunReady if waits resolved."""
        per_kind: dict[str, dict[str, SubscriptionRow]] = {}
        last: dict[str, PublishedEvent] = {}
        waits = 0
        for outcome in written:
            waits += outcome.waits
            if outcome.event is None:
                continue
            for kind_name, rows in outcome.by_kind.items():
                known = per_kind.setdefault(kind_name, {})
                for row in rows:
                    known[row.id] = row
                last[kind_name] = outcome.event
        for kind_name, rows_by_id in per_kind.items():
            try:
                self._kinds[kind_name].after_commit(last[kind_name], list(rows_by_id.values()))
            except Exception:  # a hint must never fail a committed publish
                log.exception("after_commit_failed", kind=kind_name)
        if waits:
            self._waker.notify(RunReady())

    async def explain(self, topic: str, payload: Any) -> Explanation:
        """Dry run: which subscriptions and waits would receive this event, and why not others.

        A payload `publish` would refuse (bad JSON, or not valid against the topic's schema)
        raises the same `InvalidInput`.
        """
        if isinstance(payload, BaseModel):
            payload = payload.model_dump(mode="json", by_alias=True)
        text = self._validate(topic, payload, None)
        schema_version = None
        if self._contracts is not None:
            schema_version = await self._contracts.check(topic, payload, text=text)
        verdicts = []
        for compiled in await self._subscriptions.compiled():
            verdicts.append(_verdict(compiled, topic, payload))
        run_ids: list[str] = []
        if self._resolver is not None:
            with db.map_errors():
                async with self._pool.acquire() as conn:
                    run_ids = await self._resolver.matching_wait_runs(conn, topic, payload)
        waits = len(run_ids)
        return Explanation(topic, verdicts, waits, run_ids, schema_version)


def _verdict(compiled: CompiledSubscription, topic: str, payload: Any) -> SubscriptionVerdict:
    record = compiled.record
    reason: str | None = None
    if not compiled.pattern.matches(topic):
        reason = f"pattern {record.pattern!r} does not match topic {topic!r}"
    elif record.filter is not None and not contains(payload, record.filter):
        reason = f"filter mismatch at {first_mismatch(payload, record.filter)!r}"
    elif record.status != "active":
        reason = f"subscription is {record.status}" + (
            f": {record.status_reason}" if record.status_reason else ""
        )
    return SubscriptionVerdict(
        record.id, record.pattern, record.kind, record.target, record.status, reason is None, reason
    )
