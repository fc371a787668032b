"""`CommitWatch`: run an action once a caller's transaction commits, and never if it aborts.

A write made with the caller's connection (`publish(conn=...)`, `start(conn=...)`) commits when
the caller commits, which this process cannot see. Metrics must count only what committed, so
the watch reads the id of the caller's transaction (one statement on its connection) and then
asks Postgres, from the pool, whether that transaction committed (`pg_xact_status`), at growing
intervals until it is known. A connection outside a transaction block has committed its
statements already: the action runs at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from ripple.platform.core.db import Connection, Pool
from ripple.platform.core.logs import get_logger

__all__ = ["CommitWatch"]

log = get_logger("ripple.commit_watch")

# The caller's transaction id if it has one (it wrote); NULL outside a transaction block (its
# statements committed as they ran).
_CURRENT_XACT: Final = "SELECT pg_current_xact_id_if_assigned()::text"
# $1 transaction id: 'committed', 'aborted', 'in progress', or NULL once too old to know.
_XACT_STATUS: Final = "SELECT pg_xact_status($1::text::xid8)"

#: First and longest pause between two status reads, in seconds.
FIRST_CHECK: Final = 0.02
LONGEST_CHECK: Final = 5.0
#: A transaction still open after this long is given up on (its action never runs).
GIVE_UP_AFTER: Final = 3600.0


class CommitWatch:
    """Runs actions (metrics) after the commit of caller transactions, from the pool."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def pending(self) -> int:
        """Transactions whose outcome is not known yet."""
        return len(self._tasks)

    async def after_caller_commit(self, conn: Connection, action: Callable[[], None]) -> None:
        """Run `action` once the transaction `conn` is in commits (now, if it is in none)."""
        xact: str | None = await conn.fetchval(_CURRENT_XACT)
        if xact is None:
            _run(action)
            return
        task = asyncio.create_task(self._follow(xact, action), name="ripple-commit-watch")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _follow(self, xact: str, action: Callable[[], None]) -> None:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + GIVE_UP_AFTER
        pause = FIRST_CHECK
        while loop.time() < give_up:
            await asyncio.sleep(pause)
            pause = min(pause * 2, LONGEST_CHECK)
            try:
                status = await self._pool.fetchval(_XACT_STATUS, xact)
            except Exception as exc:  # the pool closed, or Postgres is away: the count is lost
                if not self._pool.is_closing():
                    log.warning("commit_watch_failed", transaction=xact, error=str(exc))
                return
            if status == "committed":
                _run(action)
                return
            if status != "in progress":
                return  # aborted (or too old to know): nothing to count
        log.warning("commit_watch_gave_up", transaction=xact, after_seconds=GIVE_UP_AFTER)


def _run(action: Callable[[], None]) -> None:
    try:
        action()
    except Exception:  # an after-commit action (metrics) never fails the caller
        log.exception("after_commit_failed")
