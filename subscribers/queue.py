"""`QueueKind`: fan-out to durable queues (one message per event and subscription).

The message body is the event payload; headers carry `topic` and `eventId`. The deduplication id
`"{event_id}:{subscription_id}"` makes the fan-out idempotent per (event, subscription).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ripple.platform.db import Connection
from ripple.platform.errors import InvalidInput
from ripple.platform.fanout import PublishedEvent, SubscriptionRow
from ripple.platform.queues import insert_batch, validate_queue_name
from ripple.platform.wake import NullWaker, QueueReady
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

    async def fan_out(
        self, conn: Connection, event: PublishedEvent, subscriptions: Sequence[SubscriptionRow]
    ) -> int:
        by_queue: dict[str, list[SubscriptionRow]] = {}
        for sub in subscriptions:
            by_queue.setdefault(str(sub.target["queue"]), []).append(sub)
        headers = {"topic": event.topic, "eventId": event.event_id}
        written = 0
        for queue, subs in by_queue.items():
            count = len(subs)
            await insert_batch(
                conn,
                queue,
                [event.payload] * count,
                [headers] * count,
                [None] * count,
                [f"{event.event_id}:{sub.id}" for sub in subs],
                [0.0] * count,
            )
            written += count
        return written

    def after_commit(self, event: PublishedEvent, subscriptions: Sequence[SubscriptionRow]) -> None:
        queues = {str(sub.target["queue"]) for sub in subscriptions}
        self._waker.notify(*(QueueReady(queue=queue) for queue in sorted(queues)))
