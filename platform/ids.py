"""Identifier types and their generation; no I/O."""

from __future__ import annotations

import os
import threading
import time
import uuid
from typing import NewType

__all__ = ["EventId", "MessageId", "RunId", "SubscriptionId", "new_id", "uuid7"]

RunId = NewType("RunId", str)
EventId = NewType("EventId", str)
SubscriptionId = NewType("SubscriptionId", str)
MessageId = NewType("MessageId", str)


_RAND_BITS = 74  # rand_a (12 bits) and rand_b (62 bits) of RFC 9562's layout
_lock = threading.Lock()
_last = (0, 0)  # (unix ms, rand) of the previous id from this process


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7), so ids sort by creation and index well.

    Ids from one process are strictly increasing: within the same millisecond (or if the clock
    steps back) the random part of the previous id is incremented (RFC 9562, method 3).
    """
    global _last
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big") >> (80 - _RAND_BITS)
    with _lock:
        last_ms, last_rand = _last
        if ms <= last_ms:
            ms, rand = last_ms, last_rand + 1
            if rand >> _RAND_BITS:  # the counter overflowed: borrow the next millisecond
                ms, rand = ms + 1, 0
        _last = (ms, rand)
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= (rand >> 62) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)


def new_id() -> str:
    """A new time-ordered id as text."""
    return str(uuid7())
