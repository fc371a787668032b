"""`Cancels`: cancel a run and its active descendants, in one transaction with its audit row;
hints after commit. (Bulk cancels are `RunOperations.cancel_many`.)"""

from __future__ import annotations

from ripple.platform.access import audit_store
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool, transaction
from ripple.platform.core.deadlines import Deadline, bounded
from ripple.platform.core.wake import NullWaker
from ripple.platform.errors import NotFound
from ripple.workflows import store
from ripple.workflows.runs.settle import notify_canceled, settle_canceled

__all__ = ["Cancels"]


class Cancels:
    """Cancel one run (with its tree)."""

    def __init__(self, pool: Pool, waker: NullWaker, settings: Settings) -> None:
        self.pool = pool
        self.waker = waker
        self.settings = settings

    async def cancel(self, run_id: str) -> bool:
        """Cancel a run and its active descendants; True if the run was still active."""
        return await bounded(self._cancel(run_id), Deadline(self.settings.db_timeout))

    async def _cancel(self, run_id: str) -> bool:
        async with transaction(self.pool) as conn:
            # The root first: a transaction of the run holding its row (starting a child)
            # commits before the tree is read.
            if await store.lock_run(conn, run_id=run_id) is None:
                raise NotFound(f"no run {run_id}")
            rows = await store.cancel_trees(conn, run_ids=[run_id])
            if not rows:
                return False
            await settle_canceled(conn, rows)
            await audit_store.record(conn, "run.cancel", run_id, {"canceled": len(rows)})
        notify_canceled(self.waker, rows)
        # An ended run may still have had active descendants: those are canceled, but the
        # answer is about the run itself.
        return any(row.run_id == run_id for row in rows)
