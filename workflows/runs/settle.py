"""Settling a run's end where it touches other runs: a child's result in its parent step, and
what a cancel leaves behind (waits, parents, wake hints). Both sides use it: a cancel from
`runs/` and a run's own end in `runtime/`'s writer, so it lives here, below the runtime.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ripple.platform.core.db import Connection
from ripple.platform.core.wake import NullWaker, RunCanceled, RunFinished, RunReady
from ripple.platform.ops import metrics
from ripple.workflows import store
from ripple.workflows.journal import Entry, StepStatus

__all__ = ["ChildRow", "complete_parent_step", "notify_canceled", "settle_canceled"]


class ChildRow(Protocol):
    """A run row's link to the parent step that started it (all None for a top-level run)."""

    @property
    def parent_run_id(self) -> str | None: ...
    @property
    def parent_step_key(self) -> str | None: ...
    @property
    def parent_step_seq(self) -> int | None: ...


async def complete_parent_step(
    conn: Connection,
    child: ChildRow,
    child_run_id: str,
    status: str,
    output: Any,
    error: dict[str, Any] | None,
) -> None:
    """Record a child's end as its parent's step result and make the parent available (nothing
    for a top-level run).

    The parent row is locked first so a parent that is suspending at this moment sees it.
    """
    parent_run_id = child.parent_run_id
    if parent_run_id is None:
        return
    assert child.parent_step_key is not None
    assert child.parent_step_seq is not None
    await store.lock_run(conn, run_id=parent_run_id)
    pending = Entry(child.parent_step_key, child.parent_step_seq, "child", StepStatus.PENDING)
    if status == "completed":
        entry = pending.completed(output, None)
    else:
        entry = pending.failed(error, None, output={"runId": child_run_id})
    await store.complete_parent_step(conn, parent_run_id=parent_run_id, entry=entry.to_json())


async def settle_canceled(conn: Connection, rows: Sequence[store.CanceledRun]) -> list[str]:
    """After `store.cancel_trees` canceled `rows`: drop their waits and report each canceled
    run whose parent stays active as its parent's failed step, in the caller's transaction.
    Returns the canceled run ids (`notify_canceled` after commit)."""
    ids = [row.run_id for row in rows]
    await store.delete_waits_of(conn, run_ids=ids)
    canceled = set(ids)
    for row in rows:
        if row.parent_run_id not in canceled:  # a canceled parent needs no step result
            await complete_parent_step(conn, row, row.run_id, "failed", None, row.error)
    return ids


def notify_canceled(
    waker: NullWaker, rows: Sequence[store.CanceledRun], *, parents: bool = True
) -> None:
    """After the commit of a cancel: metrics, and wake whoever waits on those runs (and, with
    `parents`, the parents that got a result from `settle_canceled`)."""
    ids = [row.run_id for row in rows]
    for row in rows:
        metrics.RUNS_COMPLETED.labels(row.workflow, "canceled").inc()
    waker.notify(RunCanceled(run_ids=ids), *(RunFinished(run_id=i) for i in ids))
    if parents:
        waker.notify(RunReady())
