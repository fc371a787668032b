"""The caller's deadline on database work: a call is answered within `RIPPLE_DB_TIMEOUT` with
its outcome or `Unavailable`, whatever the database does meanwhile.

asyncpg's `command_timeout` fails a statement on time, but not the call around it: the
connection is handed back to the pool only once the server acknowledges the cancel request,
and a transaction's rollback waits for that too, so on a frozen server (a stalled disk, a
paused VM) the caller waits for the thaw. `bounded` runs such work apart from its caller: at
the deadline the caller gets `Unavailable`, and the work is cancelled and unwinds on its own.
What it wrote may still commit; the caller finds that outcome by retrying with the same
idempotency key. A lone statement needs no task: the pool hands its connection back in the
background (`db.create_pool`). Owns no connection and knows no table.

The deadline is the timeout plus `GRACE`: on a server that answers (a statement waiting on a
lock), the statement's own timeout fires first and its cancel is acknowledged within it, so
the caller hears the definite outcome (nothing written) instead of an unknown one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

from ripple.platform.errors import Unavailable

__all__ = ["GRACE", "Deadline", "bounded", "detach", "timed_out"]

T = TypeVar("T")

DB_TIMEOUT_MESSAGE: Final = (
    "the database did not answer within RIPPLE_DB_TIMEOUT; the outcome is unknown: "
    "retry (with the same idempotency key)"
)

#: Seconds past the timeout a call's work gets to end by itself before its caller is answered.
GRACE: Final = 0.25

#: Work whose caller was answered and which is still unwinding (the loop keeps only weak
#: references to tasks).
_abandoned: set[asyncio.Task[Any]] = set()


def timed_out() -> Unavailable:
    """The error of a call whose database work outlasted its deadline."""
    return Unavailable(DB_TIMEOUT_MESSAGE)


class Deadline:
    """When a call must be answered: `seconds` (its timeout) and `GRACE` after it began."""

    __slots__ = ("at",)

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds + GRACE

    def left(self) -> float:
        """Seconds left (0 once passed)."""
        return max(0.0, self.at - time.monotonic())


async def bounded(work: Coroutine[Any, Any, T], deadline: Deadline | None) -> T:
    """`await work`, but raise `Unavailable` once `deadline` passes without waiting for the
    work to unwind (it is cancelled). Without a deadline, just `await work`.

    Only for work on connections of its own (the pool's): never on a caller's connection,
    which the caller would go on using while the cancelled work still holds it.
    """
    if deadline is None:
        return await work
    task = asyncio.ensure_future(work)
    try:
        done, _ = await asyncio.wait((task,), timeout=deadline.left())
    except BaseException:  # the caller was cancelled: so is its work, without waiting
        _abandon(task)
        raise
    if done:
        return task.result()
    _abandon(task)
    raise timed_out()


def _abandon(task: asyncio.Task[Any]) -> None:
    task.cancel()
    detach(task)


def detach(task: asyncio.Task[Any]) -> None:
    """Let `task` finish on its own: referenced until done, its outcome retrieved."""
    _abandoned.add(task)
    task.add_done_callback(_forget)


def _forget(task: asyncio.Task[Any]) -> None:
    _abandoned.discard(task)
    if not task.cancelled():
        task.exception()  # retrieved: its caller was answered already
