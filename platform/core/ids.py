"""Identifier types and their generation; no I/O."""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Final, NewType

from ripple.platform.errors import InvalidInput

__all__ = [
    "MAX_IDEMPOTENCY_KEY",
    "EventId",
    "MessageId",
    "RunId",
    "SubscriptionId",
    "check_idempotency_key",
    "check_text",
    "derived_id",
    "id_time",
    "id_time_floor",
    "new_id",
    "new_ids",
    "uuid7",
]

#: Longest idempotency key (characters) a publish, a start or an operator call accepts.
MAX_IDEMPOTENCY_KEY: Final = 255

RunId = NewType("RunId", str)
EventId = NewType("EventId", str)
SubscriptionId = NewType("SubscriptionId", str)
MessageId = NewType("MessageId", str)


_RAND_BITS = 74  # rand_a (12 bits) and rand_b (62 bits) of RFC 9562's layout
_lock = threading.Lock()
_last = (0, 0)  # (unix ms, rand) of the previous id from this process
#: Random bytes are read from the OS this many ids at a time (one syscall per id cost more
#: than the rest of making the id); the rest wait in `_pool`.
_BATCH = 256
_pool = b""
_offset = 0


def _forget_pool() -> None:
    """A forked child must not reuse its parent's unread random bytes."""
    global _pool, _offset
    _pool, _offset = b"", 0


os.register_at_fork(after_in_child=_forget_pool)


def _random() -> int:
    """74 random bits from the pooled OS randomness (call with `_lock` held)."""
    global _pool, _offset
    if _offset >= len(_pool):
        _pool, _offset = os.urandom(10 * _BATCH), 0
    rand = int.from_bytes(_pool[_offset : _offset + 10], "big") >> (80 - _RAND_BITS)
    _offset += 10
    return rand


def _compose(ms: int, rand: int) -> int:
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= (rand >> 62) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return value


def _uuid7_int() -> int:
    global _last
    ms = time.time_ns() // 1_000_000
    with _lock:
        rand = _random()
        last_ms, last_rand = _last
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1
            if rand >> _RAND_BITS:  # the counter overflowed: borrow the next millisecond
                ms, rand = ms + 1, 0
        _last = (ms, rand)
    return _compose(ms, rand)


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7), so ids sort by creation and index well.

    Ids from one process are strictly increasing: within the same millisecond (or if the clock
    steps back) the random part of the previous id is incremented (RFC 9562, method 3).
    """
    return uuid.UUID(int=_uuid7_int())


def _text(value: int) -> str:
    h = value.to_bytes(16, "big").hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_id() -> str:
    """A new time-ordered id as text (`uuid7()`'s canonical form, without a UUID object)."""
    return _text(_uuid7_int())


def new_ids(count: int) -> list[str]:
    """`count` new ids as `new_id()` makes them, increasing, for one batch of rows: one clock
    read and one lock for all (ids of one millisecond are consecutive, as with `new_id`)."""
    global _last
    ms = time.time_ns() // 1_000_000
    values = []
    with _lock:
        last_ms, last_rand = _last
        if ms > last_ms:
            rand = _random()
        else:
            ms, rand = last_ms, last_rand + 1
        for _ in range(count):
            if rand >> _RAND_BITS:  # the counter overflowed: borrow the next millisecond
                ms, rand = ms + 1, 0
            values.append(_compose(ms, rand))
            rand += 1
        if values:
            _last = (ms, rand - 1)
    return [_text(v) for v in values]


def derived_id(time_of: str, *parts: str) -> str:
    """A UUIDv7 in the millisecond of the UUIDv7 `time_of`, its other 74 bits hashed from
    `time_of` and `parts`: the same inputs always give the same id, and it sorts (and falls in
    the same time partition) with `time_of`."""
    ms = int(time_of.replace("-", "")[:12], 16)
    digest = hashlib.blake2b("\x00".join((time_of, *parts)).encode(), digest_size=10).digest()
    return _text(_compose(ms, int.from_bytes(digest, "big") >> (80 - _RAND_BITS)))


def id_time(value: str) -> datetime:
    """The time a UUIDv7 was made (to the millisecond)."""
    return datetime.fromtimestamp(int(value.replace("-", "")[:12], 16) / 1000, UTC)


def id_time_floor(ms: int) -> str:
    """The lowest UUIDv7 of Unix millisecond `ms`: every id made then or later sorts at or above
    it (as SQL's `ripple_uuid7_floor`)."""
    return _text(_compose(ms, 0))


def check_text(value: object, what: str, *, field: str, max_length: int = 255) -> None:
    """Refuse a name or key stored as Postgres text that is not a string of 1-`max_length`
    characters, or that holds a NUL (U+0000), which Postgres text cannot store."""
    if not isinstance(value, str) or not 1 <= len(value) <= max_length:
        raise InvalidInput(f"{what} must be a string of 1-{max_length} characters", field=field)
    if "\x00" in value:
        raise InvalidInput(
            f"{what} contains the NUL character (U+0000), which Postgres cannot store; remove it",
            field=field,
        )


def check_idempotency_key(value: object, field: str = "idempotencyKey") -> None:
    """`check_text` for an idempotency key; None (no key) passes."""
    if value is not None:
        check_text(value, "idempotency_key", field=field, max_length=MAX_IDEMPOTENCY_KEY)
