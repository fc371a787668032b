"""How subscriber kinds plug into publish: one small interface, implemented in `subscribers/`.

The foundation never imports a subscriber kind; `Client` registers the kinds it composes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from ripple.platform.core.db import Connection, dumps

__all__ = [
    "EventWaitResolver",
    "FanOutItem",
    "PublishedEvent",
    "SubscriptionRow",
    "TargetKind",
]


@dataclass(frozen=True, slots=True)
class PublishedEvent:
    """An event being published, as each target kind sees it inside the publish transaction."""

    event_id: str
    topic: str
    payload: Any
    created_at: datetime
    #: W3C trace context of the publisher, if tracing is on.
    trace: dict[str, str] | None = None
    #: Set when an operator replays the event: kinds then write new deliveries (new ids and
    #: deduplication keys) instead of deduplicating against the live ones.
    replay_id: str | None = None
    #: `payload` as compact JSON text when the publisher has encoded it already (see
    #: `payload_text`), so fan-out writes the same bytes without encoding them again.
    payload_json: str | None = None
    #: The topic schema version the payload was validated against (None: no schema).
    schema_version: int | None = None
    #: Written by this very transaction (a publish, not a backfill or replay): no delivery
    #: of it can exist yet, so a kind may skip probing for one.
    fresh: bool = False

    def payload_text(self) -> str:
        """The payload as compact JSON text (encoded once by publish; else encoded here)."""
        return self.payload_json if self.payload_json is not None else dumps(self.payload)


@dataclass(frozen=True, slots=True)
class SubscriptionRow:
    """A matching, active subscription handed to its kind for fan-out."""

    id: str
    pattern: str
    kind: str
    target: dict[str, Any]


#: One event and the subscriptions of one kind it goes to.
FanOutItem = tuple[PublishedEvent, Sequence[SubscriptionRow]]


class TargetKind(Protocol):
    """A kind of subscription target (queue, webhook, workflow)."""

    #: The `type` discriminator of the targets it handles.
    kind: str

    async def validate(self, target: dict[str, Any]) -> dict[str, Any]:
        """Check a target (JSON form, with `type`) before a subscription is stored.

        Returns the normalised target to store; raises `InvalidInput` saying what is wrong.
        """
        ...

    async def fan_out(self, conn: Connection, items: Sequence[FanOutItem]) -> list[int]:
        """Write this kind's delivery rows for every (event, subscriptions) in `items`, in the
        caller's transaction, with as few statements as the kind can (one per call is the aim).

        Returns how many deliveries each item wrote, in order. Must be idempotent per (event,
        subscription, `event.replay_id`).
        """
        ...

    def after_commit(self, event: PublishedEvent, subscriptions: Sequence[SubscriptionRow]) -> None:
        """Send wake hints once the publish transaction committed. Never raises."""
        ...

    def count_committed(self, written: Sequence[tuple[Sequence[SubscriptionRow], int]]) -> None:
        """Count (metrics) what committed publishes wrote for this kind: per event, its
        subscriptions of this kind and how many deliveries `fan_out` wrote for them. Called
        once, when the transaction is known to have committed. Never raises."""
        ...


class EventWaitResolver(Protocol):
    """Resolves workflow waits on a topic inside the publish transaction."""

    async def resolve_event_waits(self, conn: Connection, topic: str, payload: Any) -> int:
        """Resolve every wait on `topic` whose match `payload` contains; return how many.

        The caller sends a `RunReady` hint after commit when the count is not zero.
        """
        ...

    async def matching_wait_runs(self, conn: Connection, topic: str, payload: Any) -> list[str]:
        """Runs with a wait an event on `topic` with `payload` would resolve (read-only, for
        `Publisher.explain`)."""
        ...
