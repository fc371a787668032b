"""`StallDetector`: tells when every active step call of a run is blocked, so the run can be
parked (suspended) instead of holding its worker slot. Pure: no I/O.

A step call *enters* when it starts and *exits* when it returns; while it waits (a sleep, a
retry backoff, an event wait, a child run, a stopping worker's release) it is *blocked*. The
run is stalled when at least one call is active and all active calls are blocked, and nothing
moved for a few event-loop iterations (so tasks started by the same `asyncio.gather` had their
chance to enter their steps). A stall on a timer due within `inline_wait` is not one: the
timer is waited for in memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

__all__ = ["Block", "StallDetector"]

#: Event-loop iterations without progress before "all blocked" counts as a stall.
_QUIET_HOPS = 3


@dataclass(slots=True)
class Block:
    """What a blocked step call waits for: `kind` (sleep, retry, wait, child, release), its
    step key, and when it is due by itself (None: only an outside event unblocks it)."""

    kind: str
    key: str
    wake_at: datetime | None

    @property
    def is_timer(self) -> bool:
        return self.kind in ("sleep", "retry")


class StallDetector:
    """Counts active and blocked step calls of one run and reports stalls.

    `on_stall()` is called once the run is stalled (unless `stopped()` says it is already
    being stopped). `on_timers_beside_work()` is called when a stall check finds blocked
    timers that do not stall the run (other calls are still working, or the timer is due
    within `inline_wait`): what finished before them is then committed by the engine.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], datetime],
        is_stopping: Callable[[], bool],
        stopped: Callable[[], bool],
        on_stall: Callable[[], None],
        on_timers_beside_work: Callable[[], None],
        inline_wait: float,
    ) -> None:
        self._clock = clock
        self._is_stopping = is_stopping
        self._stopped = stopped
        self._on_stall = on_stall
        self._on_timers = on_timers_beside_work
        self.inline_wait = inline_wait
        self._active = 0
        self._blocked: dict[int, Block] = {}
        self._progress = 0

    @property
    def blocks(self) -> list[Block]:
        """What the blocked calls wait for, right now."""
        return list(self._blocked.values())

    def is_inline(self, kind: str, wake_at: datetime | None) -> bool:
        """Whether a timer of `kind` due at `wake_at` is waited for in memory (never parks)."""
        return (
            kind in ("sleep", "retry")
            and wake_at is not None
            and self._due_within_inline_wait(wake_at)
        )

    def _due_within_inline_wait(self, when: datetime) -> bool:
        return (when - self._clock()).total_seconds() <= self.inline_wait

    def enter(self) -> None:
        self._active += 1
        self._progress += 1

    def exit(self) -> None:
        self._active -= 1
        self._progress += 1
        if self._blocked:  # a stall needs a blocked call: nothing to check otherwise
            self._schedule_check()

    async def block(self, kind: str, key: str, wake_at: datetime | None) -> None:
        """Wait, blocked, until `wake_at` (forever when None: the caller is canceled)."""
        token = object()
        self._blocked[id(token)] = Block(kind, key, wake_at)
        self._progress += 1
        self._schedule_check()
        try:
            if wake_at is None:
                await asyncio.get_running_loop().create_future()
            else:
                delay = (wake_at - self._clock()).total_seconds()
                if delay > 0:
                    await asyncio.sleep(delay)
        finally:
            del self._blocked[id(token)]
            self._progress += 1

    def _schedule_check(self) -> None:
        asyncio.get_running_loop().call_soon(self._check, self._progress, _QUIET_HOPS)

    def _check(self, seen: int, hops: int) -> None:
        if seen != self._progress or self._stopped():
            return
        if hops > 0:
            asyncio.get_running_loop().call_soon(self._check, seen, hops - 1)
            return
        if self._active == 0 or len(self._blocked) != self._active:
            self._timers_beside_work()
            return
        if not self._is_stopping():
            wakes = [b.wake_at for b in self._blocked.values() if b.wake_at is not None]
            soonest = min(wakes, default=None)
            if (
                soonest is not None
                and (soonest - self._clock()).total_seconds() <= self.inline_wait
            ):
                self._timers_beside_work()
                return
        self._on_stall()

    def _timers_beside_work(self) -> None:
        if any(b.is_timer for b in self._blocked.values()):
            self._on_timers()
