"""`Subscriptions`: create, list, pause, resume, delete, and the per-process compiled cache.

The cache holds every subscription compiled (patterns as matchers, indexed by first segment)
so publish never scans the table. It is invalidated by a `SubscriptionsChanged` hint and, in
case a hint is lost, by a version counter row that every change bumps in its own transaction
and that the cache re-reads at most once per poll interval. Knows no subscriber kind: kinds
are handed in as `TargetKind`s and validate their own targets.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import dataclasses
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ripple.platform.access import audit_store
from ripple.platform.core import db
from ripple.platform.core.config import Settings
from ripple.platform.core.deadlines import Deadline, bounded
from ripple.platform.core.ids import new_id
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import CH_SUBSCRIPTIONS, Listener, NullWaker, SubscriptionsChanged
from ripple.platform.errors import InvalidInput, NotFound
from ripple.platform.events import backfill_store, subscription_store
from ripple.platform.events.backfill import check_retained
from ripple.platform.events.contracts.validation import Contracts
from ripple.platform.events.fanout import SubscriptionRow, TargetKind
from ripple.platform.events.subscription_store import SubscriptionRecord
from ripple.platform.events.topics import (
    Pattern,
    check_json,
    compile_pattern,
    contains,
    validate_pattern,
)

__all__ = ["CompiledSubscription", "Subscription", "Subscriptions"]

log = get_logger("ripple.subscriptions")

#: Topics whose fan-out targets one compiled set remembers (a set is rebuilt on every
#: subscription change, which forgets them); past this many it starts over.
TARGETS_MEMO: Final = 4096

#: The rows an event fans out to, by kind (shared between publishes: read only).
Targets = Mapping[str, Sequence[SubscriptionRow]]

#: A subscription as callers see it (id, pattern, kind, target, filter, status, status_reason,
#: created_at, updated_at).
Subscription = SubscriptionRecord


@dataclass(frozen=True, slots=True)
class CompiledSubscription:
    """A subscription ready for matching."""

    record: SubscriptionRecord
    pattern: Pattern
    row: SubscriptionRow

    @property
    def active(self) -> bool:
        return self.record.status == "active"


class _CompiledSet:
    """Every subscription, indexed: exact patterns by topic, wildcards by first segment."""

    def __init__(self, records: list[SubscriptionRecord], version: int) -> None:
        #: The subscription-set version these records are exactly (read in one snapshot).
        self.version = version
        self.all: list[CompiledSubscription] = []
        self._exact: dict[str, list[CompiledSubscription]] = {}
        self._by_first: dict[str, list[CompiledSubscription]] = {}
        self._wild_first: list[CompiledSubscription] = []
        #: per topic: its active subscriptions, and their targets when none has a filter
        self._targets: dict[str, tuple[tuple[CompiledSubscription, ...], Targets | None]] = {}
        for record in records:
            compiled = CompiledSubscription(
                record,
                compile_pattern(record.pattern),
                SubscriptionRow(record.id, record.pattern, record.kind, record.target),
            )
            self.all.append(compiled)
            first = compiled.pattern.segments[0]
            if compiled.pattern.regex is None:
                self._exact.setdefault(record.pattern, []).append(compiled)
            elif first in ("*", "#"):
                self._wild_first.append(compiled)
            else:
                self._by_first.setdefault(first, []).append(compiled)

    def matching(self, topic: str) -> list[CompiledSubscription]:
        """Subscriptions (any status) whose pattern matches `topic`, oldest first."""
        found = list(self._exact.get(topic, ()))
        first = topic.split(".", 1)[0]
        found.extend(c for c in self._by_first.get(first, ()) if c.pattern.matches(topic))
        found.extend(c for c in self._wild_first if c.pattern.matches(topic))
        if len(found) > 1:
            found.sort(key=lambda c: c.record.id)
        return found

    def targets(self, topic: str, payload: Any) -> Targets:
        """The rows of the active subscriptions matching `topic` whose filter `payload`
        satisfies, by kind, oldest first. Remembered per topic while no match has a filter
        (then the same for every payload): a publish matches and groups nothing again."""
        memo = self._targets.get(topic)
        if memo is None:
            if len(self._targets) >= TARGETS_MEMO:
                self._targets.clear()
            active = tuple(c for c in self.matching(topic) if c.active)
            fixed = None if any(c.record.filter is not None for c in active) else _by_kind(active)
            memo = self._targets[topic] = (active, fixed)
        active, fixed = memo
        if fixed is not None:
            return fixed
        return _by_kind(
            [c for c in active if c.record.filter is None or contains(payload, c.record.filter)]
        )


def _by_kind(subscriptions: Sequence[CompiledSubscription]) -> Targets:
    grouped: dict[str, list[SubscriptionRow]] = {}
    for compiled in subscriptions:
        grouped.setdefault(compiled.record.kind, []).append(compiled.row)
    return {kind: tuple(rows) for kind, rows in grouped.items()}


class Subscriptions:
    """Subscription CRUD and the compiled set publish matches against.

    Args:
        pool: the database pool.
        waker: the wake layer (hints on change; listens to other processes' changes).
        settings: for the poll interval and JSON limits.
        kinds: target kinds by `type`; each validates its targets.
        contracts: topic schemas a filter's key paths must be declared in (optional).
    """

    def __init__(
        self,
        pool: db.Pool,
        waker: NullWaker,
        settings: Settings,
        kinds: Mapping[str, TargetKind],
        contracts: Contracts | None = None,
    ) -> None:
        self._pool = pool
        self._contracts = contracts
        self._waker = waker
        self._settings = settings
        self._kinds = kinds
        self._set: _CompiledSet | None = None
        self._version = -1
        self._checked_at = 0.0
        self._listener: Listener | None = None
        self._listening = False
        # Owns the listener's registration: `close()` exits it (unregistering from the waker).
        self._exits = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()

    # -- CRUD ------------------------------------------------------------------------------

    async def subscribe(
        self,
        pattern: str,
        target: dict[str, Any],
        filter: dict[str, Any] | None = None,
        *,
        backfill_since: datetime | None = None,
    ) -> Subscription:
        """Store a subscription of `target` (JSON form with `type`) to topics matching `pattern`.

        With `backfill_since`, the subscription is marked for a backfill of the retained events
        published since then (run it with `Backfills.run_backfill`).
        """
        validate_pattern(pattern)
        if backfill_since is not None:
            backfill_since = check_retained(backfill_since, self._settings, "backfill_since")
        if not isinstance(target, dict) or "type" not in target:
            raise InvalidInput(
                "target must be a QueueTarget, WebhookTarget or WorkflowTarget (JSON with 'type')",
                field="target",
            )
        kind = self._kinds.get(str(target["type"]))
        if kind is None:
            raise InvalidInput(
                f"unknown target type {target['type']!r}; use one of {sorted(self._kinds)}",
                field="target.type",
            )
        if filter is not None:
            if not isinstance(filter, dict):
                raise InvalidInput(
                    "filter must be a JSON object such as {'plan': 'pro'}", field="filter"
                )
            check_json(
                filter,
                field="filter",
                max_depth=self._settings.max_json_depth,
                max_bytes=self._settings.max_body_bytes,
            )
            if self._contracts is not None:
                await self._contracts.check_filter(pattern, filter)
        normalized = await kind.validate(dict(target))
        async with db.transaction(self._pool) as conn:
            record = await subscription_store.insert_subscription(
                conn, new_id(), pattern, kind.kind, normalized, filter
            )
            version = await subscription_store.bump_version(conn)
            if backfill_since is not None:
                await backfill_store.set_backfill(conn, record.id, backfill_since, version)
                record = dataclasses.replace(record, backfill_since=backfill_since)
            details: dict[str, Any] = {"pattern": pattern, "kind": kind.kind}
            if backfill_since is not None:
                details["backfill_since"] = backfill_since.isoformat()
            await audit_store.record(conn, "subscription.create", record.id, details)
            if backfill_since is not None:
                # The backfill is requested here (it resumes until done), so it is audited here.
                await audit_store.record(
                    conn,
                    "subscription.replay",
                    record.id,
                    {"backfill": True, "since": backfill_since.isoformat()},
                )
        self._changed()
        log.info("subscription_created", subscription_id=record.id, pattern=pattern, kind=kind.kind)
        return record

    async def unsubscribe(self, subscription_id: str) -> bool:
        """Delete a subscription; True if it existed."""
        if not _is_uuid(subscription_id):
            return False
        async with db.transaction(self._pool) as conn:
            deleted = await subscription_store.delete_subscription(conn, subscription_id)
            if deleted:
                await subscription_store.bump_version(conn)
                await audit_store.record(conn, "subscription.delete", subscription_id)
        if deleted:
            self._changed()
            log.info("subscription_deleted", subscription_id=subscription_id)
        return deleted

    async def get(self, subscription_id: str) -> Subscription | None:
        """The subscription, or None."""
        if not _is_uuid(subscription_id):
            return None
        with db.map_errors():
            async with self._pool.acquire() as conn:
                return await subscription_store.get_subscription(conn, subscription_id)

    async def list(self) -> builtins.list[Subscription]:
        """Every subscription, oldest first."""
        with db.map_errors():
            async with self._pool.acquire() as conn:
                return await subscription_store.list_subscriptions(conn)

    async def pause(self, subscription_id: str) -> Subscription:
        """Stop delivering to a subscription (events published meanwhile are not queued for it)."""
        return await self._set_status(subscription_id, "paused", None, "subscription.pause")

    async def resume(self, subscription_id: str) -> Subscription:
        """Deliver again to a paused or disabled subscription."""
        return await self._set_status(subscription_id, "active", None, "subscription.resume")

    async def disable(self, subscription_id: str, reason: str) -> Subscription:
        """Disable a subscription with a reason (e.g. its webhook endpoint is gone)."""
        return await self._set_status(subscription_id, "disabled", reason)

    async def _set_status(
        self, subscription_id: str, status: str, reason: str | None, action: str | None = None
    ) -> Subscription:
        """Set the status; `action` names the audit row an operator's change writes."""
        record = None
        if _is_uuid(subscription_id):
            async with db.transaction(self._pool) as conn:
                record = await subscription_store.set_status(conn, subscription_id, status, reason)
                if record is not None:
                    await subscription_store.bump_version(conn)
                    if action is not None:
                        await audit_store.record(conn, action, subscription_id)
        if record is None:
            raise NotFound(f"no subscription {subscription_id!r}; list them with list()")
        self._changed()
        log.info("subscription_status_changed", subscription_id=subscription_id, status=status)
        return record

    def _changed(self) -> None:
        self._set = None
        self._waker.notify(SubscriptionsChanged())

    # -- the compiled cache ----------------------------------------------------------------

    async def close(self) -> None:
        """Unregister the cache's change listener (the owner calls this before closing the
        waker); a later read registers it again."""
        self._listener = None
        self._listening = False
        self._set = None
        await self._exits.aclose()

    async def compiled(self) -> builtins.list[CompiledSubscription]:
        """Every subscription compiled (from the cache when it is current)."""
        return (await self._current()).all

    async def matching(self, topic: str) -> builtins.list[CompiledSubscription]:
        """Subscriptions of any status whose pattern matches `topic` (a valid topic)."""
        return (await self._current()).matching(topic)

    async def targets_at(
        self, topic: str, payload: Any, deadline: Deadline | None = None
    ) -> tuple[Targets, int]:
        """Where an event of `topic` with `payload` fans out (the rows of the active matching
        subscriptions whose filter it satisfies, by kind; read only), and the
        subscription-set version it was matched against (events record it, so a backfill
        knows which events a new subscription was matched with). A reload of the set gives
        up with `Unavailable` at `deadline`."""
        current = await self._current(deadline)
        return current.targets(topic, payload), current.version

    async def _current(self, deadline: Deadline | None = None) -> _CompiledSet:
        if not self._listening:
            # Registered once, until `close()` (callers that arrive while the first one waits
            # for Redis to confirm go on without it); checked without waiting below.
            self._listening = True
            self._listener = await self._exits.enter_async_context(
                self._waker.listen(CH_SUBSCRIPTIONS)
            )
        if self._listener is not None and _take_hint(self._listener):
            self._set = None
        now = time.monotonic()
        current = self._set
        if current is not None and now - self._checked_at < self._settings.poll_interval:
            return current
        return await bounded(self._reload(current), deadline)

    async def _reload(self, current: _CompiledSet | None) -> _CompiledSet:
        """The set, read again if its version changed (one caller at a time)."""
        async with self._lock:
            # Another caller may have reloaded or re-checked while this one waited.
            fresh = time.monotonic() - self._checked_at < self._settings.poll_interval
            if self._set is not None and (self._set is not current or fresh):
                return self._set
            # Kept in a local: a hint taken by a caller outside the lock clears `self._set`
            # at any await below, and this caller must still answer with a set.
            loaded = self._set
            with db.map_errors():
                async with self._pool.acquire() as conn:
                    version = await subscription_store.read_version(conn)
                    if loaded is None or version != self._version:
                        # The version and the records from one snapshot: the set is exactly
                        # that version (events record it; see backfill).
                        async with conn.transaction(isolation="repeatable_read", readonly=True):
                            version = await subscription_store.read_version(conn)
                            records = await subscription_store.list_subscriptions(conn)
                        loaded = _CompiledSet(records, version)
                        self._set = loaded
                        self._version = version
                        log.debug("subscriptions_loaded", count=len(records), version=version)
            self._checked_at = time.monotonic()
            return loaded


def _take_hint(listener: Listener) -> bool:
    """Whether a hint arrived since the last check (clearing it), without waiting.

    `Listener.wait(0)` would yield to the event loop on every publish; `take()` is free.
    """
    return listener.take()


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(str(value))
    except ValueError:
        return False
    return True
