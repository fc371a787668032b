"""`QueueKind`: fan-out to durable queues (one message per event and subscription).

The message body is the event payload; headers carry `topic`, `eventId` and, for an event
validated against a topic schema, `schemaVersion`. The deduplication id
`"{event_id}:{subscription_id}"` makes the fan-out idempotent per (event, subscription).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ripple.platform.core.db import Connection
from ripple.platform.core.wake import NullWaker, QueueReady
from ripple.platform.errors import InvalidInput
from ripple.platform.events.fanout import FanOutItem, PublishedEvent, SubscriptionRow
from ripple.subscribers.queues import queue_store
from ripple.subscribers.queues.queues import validate_queue_name
from ripple.subscribers.targets import QueueTarget

__all__ = ["QueueKind"]


class QueueKind:
    """Queue targets: `{"type": "queue", "queue": name}`."""

    kind = "queue"

    def __init__(self, waker: NullWaker) -> None:
        self._waker = waker

    async def validate(self, target: dict[str, Any]) -> dict[str, Any]:
        try:
            parsed = QueueTarget.model_validate(target)
        except ValueError as exc:
            raise InvalidInput(f"invalid queue target: {exc}", field="target") from None
        validate_queue_name(parsed.queue)
        return parsed.to_row()

    async def fan_out(self, conn: Connection, items: Sequence[FanOutItem]) -> list[int]:
        """One statement for every (event, subscription) message of the items."""
        queues: list[str] = []
        bodies: list[str] = []
        topics: list[str] = []
        event_ids: list[str] = []
        dedups: list[str] = []
        schemas: list[int | None] = []
        for event, subscriptions in items:
            body = event.payload_text()
            for sub in subscriptions:
                queues.append(str(sub.target["queue"]))
                bodies.append(body)
                topics.append(event.topic)
                event_ids.append(event.event_id)
                schemas.append(event.schema_version)
                dedup = f"{event.event_id}:{sub.id}"
                dedups.append(dedup if event.replay_id is None else f"{dedup}:{event.replay_id}")
        if queues:
            await queue_store.insert_fanout(
                conn,
                queues,
                bodies,
                topics,
                event_ids,
                dedups,
                schemas,
                fresh=all(event.fresh for event, _ in items),
            )
        # A repeat (same event and subscription) is deduplicated; it still counts as delivered.
        return [len(subscriptions) for _, subscriptions in items]

    def count_committed(self, written: Sequence[tuple[Sequence[SubscriptionRow], int]]) -> None:
        """Nothing beyond the deliveries counted by the publisher."""

    def after_commit(self, event: PublishedEvent, subscriptions: Sequence[SubscriptionRow]) -> None:
        queues = {str(sub.target["queue"]) for sub in subscriptions}
        self._waker.notify(*(QueueReady(queue=queue) for queue in sorted(queues)))
