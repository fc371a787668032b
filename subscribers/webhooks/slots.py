"""`Slots`: the webhook dispatcher's concurrency slots, overall (`webhook_concurrency`) and per
subscription endpoint (`webhook_endpoint_concurrency`).

An attempt takes a slot when it starts and gives it back when its HTTP exchange ends; a failed
attempt's slot is held until its outcome is written (the write may disable the endpoint, and
nothing more may be sent to it before then). Every slot given back calls `on_free`, which
starts the next buffered delivery. It does no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["Slots"]


class Slots:
    """Who holds the dispatcher's slots: attempts in their exchange, and held failures."""

    def __init__(self, capacity: int, on_free: Callable[[], None]) -> None:
        self._capacity = capacity
        self._on_free = on_free
        #: attempts holding a concurrency slot; a delivered attempt gives its slot back when
        #: its HTTP exchange ends, before its outcome is written
        self.sending: dict[asyncio.Task[None], str] = {}
        #: slots taken per endpoint (attempts sending and held failures)
        self.in_flight: dict[str, int] = {}
        #: failed attempts whose slot stays taken until their outcome is written
        self.held = 0

    def free(self) -> int:
        return self._capacity - len(self.sending) - self.held

    def busy(self) -> bool:
        """Whether any attempt holds a slot."""
        return bool(self.sending or self.held)

    def take(self, task: asyncio.Task[None], sub: str) -> None:
        """`task` starts an attempt to endpoint `sub`."""
        self.in_flight[sub] = self.in_flight.get(sub, 0) + 1
        self.sending[task] = sub

    def give_back(self, task: asyncio.Task[None] | None) -> None:
        """Give back the slot (overall and per endpoint) `task` holds, if it still does."""
        sub = self.sending.pop(task, None) if task is not None else None
        if sub is not None:
            self._release_endpoint(sub)

    def hold(self, task: asyncio.Task[None] | None) -> str | None:
        """Move `task`'s slot to the outcome it hands over; the endpoint, or None if it had
        none. The recorder gives it back (`release_held`) once the outcome is written."""
        sub = self.sending.pop(task, None) if task is not None else None
        if sub is not None:
            self.held += 1
        return sub

    def release_held(self, sub: str) -> None:
        self.held -= 1
        self._release_endpoint(sub)

    def _release_endpoint(self, sub: str) -> None:
        left = self.in_flight.get(sub, 1) - 1
        if left <= 0:
            self.in_flight.pop(sub, None)
        else:
            self.in_flight[sub] = left
        self._on_free()
