"""`Queues`: named durable queues: send, receive (long-poll), ack, nack, extend, dead letters.

Every message is a row (see `queue_store`); Redis only wakes long-polling receivers, which
re-check Postgres at least every poll interval. Receipts are fenced: `"{id}.{receive_count}"`
stops matching as soon as the message is received again, so a slow consumer can never ack
(or extend) a delivery that now belongs to someone else.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

import asyncpg

from ripple.platform.core import db, wake
from ripple.platform.core.config import Settings
from ripple.platform.core.ids import check_text
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import NullWaker, QueueReady, queue_channel
from ripple.platform.errors import Conflict, InvalidInput, NotFound
from ripple.platform.events.topics import encode_json, encode_json_items
from ripple.platform.ops.partitions import Partitions
from ripple.subscribers.queues import queue_store
from ripple.subscribers.queues.queue_store import DeadLetter, QueueStats

__all__ = [
    "DEFAULT_MAX_RECEIVES",
    "DeadLetter",
    "Message",
    "MessageGone",
    "OutgoingMessage",
    "QueueStats",
    "Queues",
    "StaleReceipt",
    "validate_queue_name",
]

log = get_logger("ripple.queues")

DEFAULT_MAX_RECEIVES: Final = 10
MAX_BATCH: Final = 1000
MAX_VISIBILITY: Final = 12 * 3600.0
MAX_WAIT: Final = 300.0
_QUEUE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# Receipts joined by ",": all of them well-formed (checked once, not receipt by receipt).
_RECEIPTS: Final = re.compile(r"[0-9]{1,18}\.[0-9]{1,9}(?:,[0-9]{1,18}\.[0-9]{1,9})*")


# Message id (bigint) and receive count (int): digits that always fit their columns.
class StaleReceipt(Conflict):
    """The receipt is from an earlier delivery: the message was received again since."""


class MessageGone(NotFound):
    """No message has this receipt: it was acked, purged, or moved to the dead letters."""


def validate_queue_name(queue: object) -> str:
    """Return `queue` if it is a valid queue name, else raise `InvalidInput` saying why."""
    if not isinstance(queue, str) or not _QUEUE_NAME.fullmatch(queue):
        raise InvalidInput(
            f"queue name {queue!r} is invalid: use 1-128 letters, digits, '_', '.' or '-', "
            "starting with a letter or digit (e.g. 'audit')",
            field="queue",
        )
    return queue


def _seconds(value: timedelta | float | int | None, name: str, upper: float) -> float:
    if value is None:
        return 0.0
    secs = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not 0 <= secs <= upper:
        raise InvalidInput(
            f"{name} must be between 0 and {upper:g} seconds, got {secs:g}", field=name
        )
    return secs


def _parse_receipt(receipt: object) -> tuple[int, int]:
    """`<message id>.<receive count>`: 1-18 and 1-9 ASCII digits (Message.receipt's form)."""
    if isinstance(receipt, str):
        message_id, dot, count = receipt.partition(".")
        if (
            dot
            and 0 < len(message_id) <= 18
            and 0 < len(count) <= 9
            and receipt.isascii()
            and message_id.isdigit()
            and count.isdigit()
        ):
            return int(message_id), int(count)
    raise InvalidInput(f"{receipt!r} is not a receipt; pass Message.receipt", field="receipt")


@dataclass(slots=True)
class _Item:
    index: int = 0


@contextmanager
def _naming_item(count: int) -> Iterator[_Item]:
    """Prefix an `InvalidInput` raised for one message of a batch with that message's index."""
    item = _Item()
    try:
        yield item
    except InvalidInput as exc:
        if count == 1:
            raise
        raise InvalidInput(f"message {item.index} of the batch: {exc}", field=exc.field) from None


@dataclass(frozen=True, slots=True)
class Message:
    """A received message; `receipt` acks, nacks or extends this delivery only."""

    id: str
    body: Any
    headers: dict[str, Any]
    group_id: str | None
    receive_count: int
    receipt: str


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One message of `send_batch`."""

    body: Any
    headers: dict[str, Any] | None = None
    group_id: str | None = None
    delay: timedelta | float | None = None
    deduplication_id: str | None = None


@dataclass(slots=True)
class _Batch:
    bodies: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    groups: list[str | None] = field(default_factory=list)
    dedups: list[str | None] = field(default_factory=list)
    delays: list[float] = field(default_factory=list)


class Queues:
    """The durable queues of a deployment (`client.queues`).

    Args:
        pool: the database pool.
        waker: wakes long-polling receivers after a send.
        settings: JSON limits and the poll interval.
    """

    def __init__(self, pool: db.Pool, waker: NullWaker, settings: Settings) -> None:
        self._pool = pool
        self._waker = waker
        self._settings = settings
        self._partitions = Partitions(pool, settings)

    # -- sending ---------------------------------------------------------------------------

    def _bodies(self, bodies: Sequence[Any]) -> str:
        """Bare bodies as one JSON array text, each checked as `_body` checks one."""
        settings = self._settings
        if not any(body is None for body in bodies):
            text = encode_json_items(
                bodies, max_depth=settings.max_json_depth, max_bytes=settings.max_body_bytes
            )
            if text is not None:
                return text
        # Some body fails (or the batch check could not clear it): find it and say why.
        with _naming_item(len(bodies)) as item:
            parts = []
            for item.index, body in enumerate(bodies):
                parts.append(self._body(body))
        return "[" + ",".join(parts) + "]"

    def _body(self, body: Any) -> str:
        if body is None:
            raise InvalidInput("body must be JSON, not None; send {} for no data", field="body")
        return encode_json(
            body,
            field="body",
            max_depth=self._settings.max_json_depth,
            max_bytes=self._settings.max_body_bytes,
        )

    def _add(self, batch: _Batch, message: OutgoingMessage) -> None:
        body = self._body(message.body)
        headers = message.headers or {}
        if not isinstance(headers, dict):
            raise InvalidInput("headers must be a JSON object", field="headers")
        header_text = (
            encode_json(headers, field="headers", max_depth=4, max_bytes=64 * 1024)
            if headers
            else "{}"
        )
        for name, value in (
            ("group_id", message.group_id),
            ("deduplication_id", message.deduplication_id),
        ):
            if value is not None:
                check_text(value, name, field=name, max_length=256)
        batch.bodies.append(body)
        batch.headers.append(header_text)
        batch.groups.append(message.group_id)
        batch.dedups.append(message.deduplication_id)
        batch.delays.append(_seconds(message.delay, "delay", 14 * 24 * 3600.0))

    async def send(
        self,
        queue: str,
        body: Any,
        *,
        headers: dict[str, Any] | None = None,
        group_id: str | None = None,
        delay: timedelta | float | None = None,
        deduplication_id: str | None = None,
        conn: db.Connection | None = None,
    ) -> str:
        """Send one message; returns its id (the existing one for a repeated deduplication id)."""
        ids = await self.send_batch(
            queue, [OutgoingMessage(body, headers, group_id, delay, deduplication_id)], conn=conn
        )
        return ids[0]

    async def send_batch(
        self,
        queue: str,
        messages: Sequence[OutgoingMessage | Any],
        *,
        conn: db.Connection | None = None,
    ) -> list[str]:
        """Send many messages in one statement; items are `OutgoingMessage`s or bare bodies."""
        validate_queue_name(queue)
        if not 1 <= len(messages) <= MAX_BATCH:
            raise InvalidInput(f"send_batch takes 1-{MAX_BATCH} messages", field="messages")
        if any(isinstance(item, OutgoingMessage) for item in messages):
            batch = _Batch()
            with _naming_item(len(messages)) as item:
                for item.index, message in enumerate(messages):
                    if not isinstance(message, OutgoingMessage):
                        message = OutgoingMessage(message)
                    self._add(batch, message)
            bodies: str | _Batch = batch
        else:  # bare bodies (the common batch): one JSON array, no per-message options
            bodies = self._bodies(messages)
        with db.map_errors():
            if conn is None:  # one statement: atomic without an explicit transaction
                async with self._pool.acquire() as own:
                    ids = await insert_batch(own, queue, bodies)
                self._waker.notify(QueueReady(queue=queue))
                return ids
        async with db.transaction(self._pool, conn) as tx:
            ids = await insert_batch(tx, queue, bodies)
        # The caller commits later: a hint now alone could wake receivers that see nothing yet;
        # as publish does, hint now and again shortly after.
        wake.hint_around_caller_commit(lambda: self._waker.notify(QueueReady(queue=queue)))
        return ids

    # -- receiving -------------------------------------------------------------------------

    async def receive(
        self,
        queue: str,
        max_messages: int = 10,
        visibility_timeout: timedelta | float = 30,
        wait: timedelta | float = 0,
        *,
        fair: bool = False,
    ) -> list[Message]:
        """Receive up to `max_messages`, invisible to others for `visibility_timeout`.

        With `wait`, long-polls: returns as soon as messages arrive, or `[]` after `wait`.
        A message already received max_receives times moves to the dead letters instead.
        With `fair`, takes messages in a round robin across groups (`group_id`; the ungrouped
        messages count as one more group), FIFO within each: every group's next message,
        then every group's second, ..., so a huge group cannot starve the others. A group's
        messages then come as a run from its head, several per batch, and the group gives
        nothing more until they are all acked (or visible again).
        """
        validate_queue_name(queue)
        if not isinstance(max_messages, int) or not 1 <= max_messages <= MAX_BATCH:
            raise InvalidInput(f"max_messages must be 1-{MAX_BATCH}", field="max_messages")
        visibility = _seconds(visibility_timeout, "visibility_timeout", MAX_VISIBILITY)
        waiting = _seconds(wait, "wait", MAX_WAIT)
        messages = await self._claim(queue, max_messages, visibility, fair)
        if messages or waiting <= 0:
            return messages
        deadline = time.monotonic() + waiting
        async with self._waker.listen(queue_channel(queue)) as listener:
            while True:
                # Registered before this check, so a send between check and wait wakes us.
                messages = await self._claim(queue, max_messages, visibility, fair)
                remaining = deadline - time.monotonic()
                if messages or remaining <= 0:
                    return messages
                await listener.wait(remaining)

    async def _claim(
        self, queue: str, limit: int, visibility: float, fair: bool = False
    ) -> list[Message]:
        while True:
            with db.map_errors():
                async with self._pool.acquire() as conn:
                    claimed = await queue_store.claim_messages(
                        conn, queue, limit, visibility, DEFAULT_MAX_RECEIVES, fair=fair
                    )
            # Rows by position (see claim_messages), oldest id (fair: turn) first, receipt built
            # by SQL;
            # headers are NULL for none (no JSON text to decode).
            delivered = [
                Message(row[0], row[1], row[2] or {}, row[3], row[4], row[5])
                for row in claimed
                if not row[6]
            ]
            if len(delivered) == len(claimed):
                return delivered
            dying = {int(row[0]): row[4] for row in claimed if row[6]}
            for message_id in await self._bury(queue, list(dying), len(dying)):
                log.warning(
                    "queue_message_dead_lettered",
                    queue=queue,
                    message_id=str(message_id),
                    receive_count=dying[message_id],
                )
            # Only dead letters this time: there may be more behind them.
            if delivered:
                return delivered

    async def _bury(self, queue: str, ids: list[int] | None, limit: int) -> list[int]:
        """Move messages a receive marked dying (these `ids`, or any of the queue up to
        `limit`) to the dead letters; the ids moved. Creates the partitions first if none
        covers now (no sweeper or publish kept them ahead)."""
        for covered in (False, True):
            with db.map_errors():
                async with self._pool.acquire() as conn:
                    try:
                        return await queue_store.bury(conn, queue, ids, limit)
                    except asyncpg.CheckViolationError:
                        if covered:
                            raise
            await self._partitions.ensure()
        raise AssertionError("unreachable")

    # -- settling --------------------------------------------------------------------------

    async def ack(self, queue: str, receipt: str) -> None:
        """Delete the message of this delivery. Raises `StaleReceipt` / `MessageGone`."""
        validate_queue_name(queue)
        message_id, count = _parse_receipt(receipt)
        with db.map_errors():
            async with self._pool.acquire() as conn:
                # A well-formed receipt is its own one-item list (see ack_batch).
                if not await queue_store.ack_receipts(conn, queue, receipt):
                    await self._refuse(conn, queue, receipt, message_id, count)

    async def ack_batch(self, queue: str, receipts: Sequence[str]) -> list[str]:
        """Ack many deliveries in one statement; returns the receipts that were acked.

        Receipts that are stale or whose message is gone are left out (not raised).
        """
        validate_queue_name(queue)
        if not receipts:
            return []
        try:
            joined = ",".join(receipts)
        except TypeError:
            joined = ""
        # A "," inside one receipt would pass the pattern as two: the count rules that out.
        if not _RECEIPTS.fullmatch(joined) or joined.count(",") != len(receipts) - 1:
            for receipt in receipts:
                _parse_receipt(receipt)  # raises for the first malformed one
        with db.map_errors():
            async with self._pool.acquire() as conn:
                done = await queue_store.ack_receipts(conn, queue, joined)
        return [r for r in receipts if r in done]

    async def nack(self, queue: str, receipt: str, delay: timedelta | float = 0) -> None:
        """Give the message back: visible again after `delay` (0: now)."""
        await self._visibility(queue, receipt, _seconds(delay, "delay", MAX_VISIBILITY))
        self._waker.notify(QueueReady(queue=queue))

    async def extend(self, queue: str, receipt: str, visibility_timeout: timedelta | float) -> None:
        """Keep the message invisible for `visibility_timeout` from now (heartbeat)."""
        secs = _seconds(visibility_timeout, "visibility_timeout", MAX_VISIBILITY)
        await self._visibility(queue, receipt, secs)

    async def _visibility(self, queue: str, receipt: str, seconds: float) -> None:
        validate_queue_name(queue)
        message_id, count = _parse_receipt(receipt)
        with db.map_errors():
            async with self._pool.acquire() as conn:
                if not await queue_store.set_visibility(conn, queue, message_id, count, seconds):
                    await self._refuse(conn, queue, receipt, message_id, count)

    async def _refuse(
        self, conn: db.Connection, queue: str, receipt: str, message_id: int, count: int
    ) -> None:
        current = (await queue_store.receive_counts(conn, queue, [message_id])).get(message_id)
        if current is None:
            raise MessageGone(
                f"message {message_id} of queue {queue!r} no longer exists (already acked or "
                "purged); nothing to do"
            )
        if current[1]:
            raise MessageGone(
                f"message {message_id} of queue {queue!r} is a dead letter now; redrive it first"
            )
        raise StaleReceipt(
            f"receipt {receipt!r} is stale: message {message_id} was received again "
            f"(receive {current[0]}) after this receipt's receive {count}; the consumer holding "
            "the newest receipt owns it (raise the visibility timeout or extend() sooner)"
        )

    # -- administration --------------------------------------------------------------------

    async def purge(self, queue: str) -> int:
        """Delete every message of the queue (dead letters included); returns how many."""
        validate_queue_name(queue)
        async with db.transaction(self._pool) as conn:
            return await queue_store.purge(conn, queue)

    async def stats(self, queue: str) -> QueueStats:
        """Counts now: visible, in flight, delayed, dead letters, oldest visible age; each
        count reads at most `STATS_CAP` messages of one kind (see `QueueStats.lower_bounds`)."""
        validate_queue_name(queue)
        with db.map_errors():
            async with self._pool.acquire() as conn:
                return await queue_store.stats(conn, queue, queue_store.STATS_CAP)

    async def dead_letters(
        self, queue: str, limit: int = 100, *, after: str | None = None
    ) -> list[DeadLetter]:
        """Dead letters oldest first; pass the last id as `after` for the next page."""
        validate_queue_name(queue)
        limit = max(1, min(int(limit), self._settings.max_page_size))
        start = int(after) if after is not None and after.isdigit() else 0
        # Any left marked dying by a receive whose process died before it moved them.
        await self._bury(queue, None, queue_store.STATS_CAP)
        with db.map_errors():
            async with self._pool.acquire() as conn:
                return await queue_store.dead_letters(conn, queue, limit, start)

    async def redrive(
        self, queue: str, ids: Sequence[str] | None = None, *, limit: int = 1000
    ) -> int:
        """Move dead letters (these `ids`, or all up to `limit`) back to the queue, fresh."""
        validate_queue_name(queue)
        id_list = None if ids is None else [int(i) for i in ids if str(i).isdigit()]
        await self._bury(queue, None, queue_store.STATS_CAP)
        async with db.transaction(self._pool) as conn:
            moved = await queue_store.redrive(conn, queue, id_list, max(1, int(limit)))
        if moved:
            self._waker.notify(QueueReady(queue=queue))
        log.info("queue_redriven", queue=queue, count=moved)
        return moved

    async def set_max_receives(self, queue: str, n: int) -> None:
        """Receives after which an unacked message becomes a dead letter (default 10)."""
        validate_queue_name(queue)
        if not isinstance(n, int) or not 1 <= n <= 1000:
            raise InvalidInput("max_receives must be 1-1000", field="max_receives")
        async with db.transaction(self._pool) as conn:
            await queue_store.set_max_receives(conn, queue, n)


async def insert_batch(conn: db.Connection, queue: str, batch: _Batch | str) -> list[str]:
    """Insert validated messages; ids in input order. `batch` is a `_Batch` (bodies and
    headers as JSON text) or bare bodies as one JSON array text.

    A message whose deduplication id exists already gets the existing message's id.
    """
    if isinstance(batch, str):
        return await queue_store.insert_bodies(conn, queue, batch)
    bodies, dedups = batch.bodies, batch.dedups
    inserted = await queue_store.insert_messages(
        conn, queue, bodies, batch.headers, batch.groups, dedups, batch.delays
    )
    if len(inserted) == len(bodies):
        return [str(i) for i, _ in inserted]
    by_dedup = {d: i for i, d in inserted if d is not None}
    missing = [d for d in dedups if d is not None and d not in by_dedup]
    if missing:
        by_dedup.update(await queue_store.find_by_dedup(conn, queue, missing))
    plain = iter(i for i, d in inserted if d is None)
    return [str(by_dedup[d]) if d is not None else str(next(plain)) for d in dedups]
