"""Identifier types and their generation; no I/O."""

from __future__ import annotations

import os
import time
import uuid
from typing import NewType

__all__ = ["EventId", "MessageId", "RunId", "SubscriptionId", "new_id", "uuid7"]

RunId = NewType("RunId", str)
EventId = NewType("EventId", str)
SubscriptionId = NewType("SubscriptionId", str)
MessageId = NewType("MessageId", str)


def uuid7() -> uuid.UUID:
    """A time-ordered UUID (RFC 9562 version 7), so ids sort by creation and index well."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    return uuid.UUID(int=value)


def new_id() -> str:
    """A new time-ordered id as text."""
    return str(uuid7())
