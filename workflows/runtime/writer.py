"""`PgRunWriter`: the Postgres side of one claimed run's execution (the engine's RunWriter),
and `StepCommitter`, which group-commits the step flushes of all of a worker's runs.

Every method is one transaction that first locks the run *if this worker still owns it* (same
epoch, still running) and raises `LeaseLost` otherwise: a worker that lost its lease can never
write again. Then it commits the journal entries not yet written and the run's next state
together. Wake hints go out after commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ripple.platform.core.db import Connection, Pool, map_errors, transaction
from ripple.platform.core.group_commit import GroupCommit
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import NullWaker, RunFinished, RunReady
from ripple.platform.events.contracts.validation import Contracts
from ripple.platform.ops import metrics
from ripple.workflows import store
from ripple.workflows.errors import LeaseLost
from ripple.workflows.journal import Entry
from ripple.workflows.runs.settle import complete_parent_step, notify_canceled
from ripple.workflows.runtime.ports import (
    ChildSpec,
    WaitSpec,
    child_timeout_error,
    existing_child_entry,
)
from ripple.workflows.store import approvals as approval_store

__all__ = ["PgRunWriter", "StepCommitter"]

log = get_logger("ripple.workflows.writer")


@dataclass(slots=True)
class _Flush:
    """One run's request to commit its journal entries (and extend its lease, or finish)."""

    run_id: str
    epoch: int
    step_count: int
    entries: list[dict[str, Any]]
    #: Journal key prefixes to delete (trimmed loop iterations).
    trim: Sequence[str] = ()
    #: `{run_id, status, output, error}` when the run finishes with this commit.
    final: dict[str, Any] | None = None
    #: Extend the run's lease (and store its step count) with this commit.
    renew: bool = False


class StepCommitter:
    """Group commit across runs: the step flushes and completions of every run of one worker,
    one statement per batch (`GroupCommit`).

    A run asks to commit its finished steps before its next step body (or child, wait, timer)
    begins, and waits only for the commit that holds them: at once when no commit is in
    flight, else with the next batch — no fixed delay on an idle worker. Each run stays fenced
    by its epoch: a run the worker no longer owns gets `LeaseLost` without failing the others
    in its batch. A batch the database refuses for a reason other than unavailability is
    retried one run at a time, so one run's bad entry (say, a string Postgres cannot store)
    fails only that run.
    """

    def __init__(self, pool: Pool, *, lease: float) -> None:
        self.pool = pool
        self.lease = lease
        self._group: GroupCommit[_Flush, Any] = GroupCommit(self._write, name="ripple-step-commit")

    @property
    def batches(self) -> int:
        """Batches committed so far."""
        return self._group.batches

    @property
    def flushed(self) -> int:
        """Run requests committed so far."""
        return self._group.written

    async def flush(
        self,
        run_id: str,
        epoch: int,
        step_count: int,
        entries: list[Entry],
        trim: Sequence[str] = (),
        *,
        renew: bool = False,
    ) -> None:
        """Commit `entries` of one run (and delete its journal entries under the `trim` key
        prefixes), extending its lease if `renew`; raises `LeaseLost` if the run is no longer
        owned."""
        rows = _rows(run_id, entries)
        await self._group.submit(_Flush(run_id, epoch, step_count, rows, trim, renew=renew))

    async def finish(
        self,
        run_id: str,
        epoch: int,
        step_count: int,
        entries: list[Entry],
        status: str,
        output: Any,
        error: dict[str, Any] | None,
    ) -> store.RunTimes:
        """Commit `entries` of one run and finish it with `status`: the run's times
        (`created_at`, `completed_at`); raises `LeaseLost` if the run is no longer owned.
        Only for a run with no parent and no open waits (those finish in a transaction of
        their own, `PgRunWriter.finish`)."""
        final = {"run_id": run_id, "status": status, "output": output, "error": error}
        times: store.RunTimes = await self._group.submit(
            _Flush(run_id, epoch, step_count, _rows(run_id, entries), (), final)
        )
        return times

    async def _write(self, batch: list[_Flush]) -> list[Any]:
        ordered = sorted(batch, key=lambda r: r.run_id)  # lock order: no deadlock
        with map_errors():
            owned = await store.commit_runs(
                self.pool,
                run_ids=[r.run_id for r in ordered],
                epochs=[r.epoch for r in ordered],
                step_counts=[r.step_count for r in ordered],
                lease=self.lease,
                entries=[row for r in ordered for row in r.entries],
                trims=[{"run_id": r.run_id, "prefix": p} for r in ordered for p in r.trim],
                finals=[r.final for r in ordered if r.final is not None],
                renew=[r.renew for r in ordered],
            )
        return [owned.get(r.run_id) or LeaseLost(r.run_id) for r in batch]


def _rows(run_id: str, entries: list[Entry]) -> list[dict[str, Any]]:
    rows = []
    for entry in entries:
        row = entry.to_json()
        row["run_id"] = run_id
        rows.append(row)
    return rows


class PgRunWriter:
    """Fenced writes of one claimed run."""

    def __init__(
        self,
        pool: Pool,
        waker: NullWaker,
        *,
        run_id: str,
        epoch: int,
        workflow: str,
        lease: float,
        trace: dict[str, str] | None,
        may_have_waits: bool,
        committer: StepCommitter,
        parent_run_id: str | None = None,
        keyed: bool = False,
        on_cleared: Callable[[], None] | None = None,
        contracts: Contracts | None = None,
    ) -> None:
        self.pool = pool
        self.contracts = contracts
        self.committer = committer
        self.waker = waker
        self.run_id = run_id
        self.epoch = epoch
        self.workflow = workflow
        self.lease = lease
        self.trace = trace
        self.may_have_waits = may_have_waits
        self.parent_run_id = parent_run_id
        #: The run holds a concurrency slot: leaving `running` frees it (migration 0011's
        #: trigger makes the key's next parked run available), so workers are told at once.
        self.keyed = keyed
        #: Set for a suspect (claimed in isolation after a lost worker): it is cleared, and
        #: called once, when a step of the run is recorded; its worker may then claim other
        #: runs beside it.
        self._on_cleared = on_cleared

    async def _fence(self, conn: Connection | Pool, entries: list[Entry], step_count: int) -> None:
        """Lock the run if this worker still owns it, extend the lease, and journal `entries`:
        one round trip. As the first statement of a multi-statement write, the UPDATE holds the
        row lock to commit, so later statements see every resolution committed before it."""
        owned = await store.flush_run(
            conn,
            run_id=self.run_id,
            epoch=self.epoch,
            lease=self.lease,
            step_count=step_count,
            entries=[e.to_json() for e in entries],
        )
        if not owned:
            raise LeaseLost(self.run_id)

    async def flush(
        self,
        entries: list[Entry],
        step_count: int,
        trim: Sequence[str] = (),
        *,
        renew: bool = False,
    ) -> None:
        await self.committer.flush(self.run_id, self.epoch, step_count, entries, trim, renew=renew)
        if self._on_cleared is not None and any(entry.finished for entry in entries):
            await self._clear_suspect(self._on_cleared)

    async def _clear_suspect(self, on_cleared: Callable[[], None]) -> None:
        """Committed apart from the step it follows: a worker lost in between still had this
        run alone, so charging it that recovery is right."""
        with map_errors():
            if not await store.clear_suspect(self.pool, run_id=self.run_id, epoch=self.epoch):
                raise LeaseLost(self.run_id)
        self._on_cleared = None
        on_cleared()

    async def settle_race(
        self, entries: list[Entry], step_count: int, losers: Sequence[str]
    ) -> list[str]:
        """Journal a race's outcome and drop what its losing branches (key prefixes) left:
        their waits, and their child runs (canceled with their descendants). Returns the
        canceled run ids."""
        canceled: list[store.CanceledRun] = []
        async with transaction(self.pool) as conn:
            await self._fence(conn, entries, step_count)
            await store.delete_waits_under(conn, run_id=self.run_id, prefixes=losers)
            children = await store.select_children_under(conn, run_id=self.run_id, prefixes=losers)
            if children:
                canceled = await store.cancel_trees(
                    conn, run_ids=children, reason="its branch lost a race"
                )
            ids = [row.run_id for row in canceled]
            if ids:
                await store.delete_waits_of(conn, run_ids=ids)
        if ids:
            # The losers' parent is this run, which got no step result from them.
            notify_canceled(self.waker, canceled, parents=False)
        return ids

    async def check_match(self, event: str, match: dict[str, Any]) -> None:
        if self.contracts is not None:
            await self.contracts.check_match(event, match, field="match")

    async def register_wait(
        self, entries: list[Entry], step_count: int, wait: WaitSpec
    ) -> tuple[bool, Any]:
        entry = wait.entry
        async with transaction(self.pool) as conn:
            # The wait's entry is journaled pending with the fence; a buffered signal that
            # matches completes it below instead of registering the wait.
            await self._fence(conn, [*entries, entry], step_count)
            signal = await store.consume_signal(
                conn, run_id=self.run_id, name=wait.name, match=wait.match
            )
            if signal is not None:
                done = entry.completed(signal.payload, entry.started_at)
                await store.upsert_steps(conn, run_id=self.run_id, entries=[done.to_json()])
            else:
                await store.insert_wait(
                    conn,
                    run_id=self.run_id,
                    step_key=entry.key,
                    step_seq=entry.seq,
                    name=wait.name,
                    event=wait.event,
                    match=wait.match,
                    expires_at=entry.due_at,
                )
                if wait.approval is not None:
                    await approval_store.insert_approval(
                        conn,
                        run_id=self.run_id,
                        step=wait.approval["step"],
                        workflow=wait.approval["workflow"],
                        details=wait.approval["details"],
                        approvers=wait.approval["approvers"],
                        expires_at=entry.due_at,
                    )
                self.may_have_waits = True
        if signal is None:
            return (False, None)
        # counted once the signal left the inbox for good (the transaction committed)
        metrics.SIGNALS.labels("consumed_from_inbox").inc()
        return (True, signal.payload)

    async def start_child(self, entries: list[Entry], step_count: int, child: ChildSpec) -> Entry:
        entry = child.entry
        async with transaction(self.pool) as conn:
            # The step's entry (naming the child this run id) is journaled with the fence; if
            # the child exists already (its entry was lost with an earlier attempt), it is
            # corrected below.
            await self._fence(conn, [*entries, entry], step_count)
            created = await store.insert_child_run(
                conn,
                run_id=child.run_id,
                workflow=child.workflow,
                version=child.version,
                input=child.input,
                idempotency_key=child.key,
                trace=self.trace,
                parent_run_id=self.run_id,
                parent_step_key=entry.key,
                parent_step_seq=entry.seq,
            )
            if not created:
                entry = await self._existing_child(conn, child)
        if created:  # counted once the child's insert committed
            metrics.RUNS_STARTED.labels(child.workflow).inc()
        self.waker.notify(RunReady(workflow=child.workflow))
        return entry

    async def _existing_child(self, conn: Connection, child: ChildSpec) -> Entry:
        """The step's entry for a child that exists already: pending on it, or, if it ended,
        its result (nothing else would ever report it)."""
        row = await store.find_child_by_key(
            conn, workflow=child.workflow, idempotency_key=child.key
        )
        assert row is not None  # the insert conflicted on this key, and runs are not deleted
        entry = existing_child_entry(child.entry, row.run_id, row.status, row.output, row.error)
        await store.upsert_steps(conn, run_id=self.run_id, entries=[entry.to_json()])
        return entry

    async def time_out(
        self, entries: list[Entry], step_count: int, entry: Entry, is_wait: bool
    ) -> Entry:
        async with transaction(self.pool) as conn:
            await self._fence(conn, entries, step_count)
            final: Entry | None = None
            if is_wait:
                if await store.delete_wait(conn, run_id=self.run_id, step_key=entry.key):
                    final = entry.completed(None, None)
                    await store.upsert_steps(conn, run_id=self.run_id, entries=[final.to_json()])
            else:
                error = child_timeout_error(self.run_id, entry.key)
                if await store.time_out_step(conn, run_id=self.run_id, key=entry.key, error=error):
                    final = entry.failed(error, None, output=entry.output)
            if final is None:
                row = await store.read_step(conn, run_id=self.run_id, key=entry.key)
                final = Entry.from_row(row) if row is not None else entry
        return final

    async def suspend(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        wake_at: datetime,
        blocking_keys: list[str],
    ) -> datetime:
        async with transaction(self.pool) as conn:
            await self._fence(conn, entries, step_count)
            available = await store.suspend_run(
                conn,
                run_id=self.run_id,
                epoch=self.epoch,
                status=status,
                wake_at=wake_at,
                step_count=step_count,
                blocking_keys=blocking_keys,
            )
        return available

    async def finish(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        output: Any,
        error: dict[str, Any] | None,
    ) -> None:
        if self.parent_run_id is None and not self.may_have_waits:
            times = await self.committer.finish(
                self.run_id, self.epoch, step_count, entries, status, output, error
            )
            self._finished(status, times.created_at, times.completed_at, None)
            return
        async with transaction(self.pool) as conn:
            if self.parent_run_id is not None:
                # Parent before child, the order cancel takes them in (no deadlock).
                await store.lock_run(conn, run_id=self.parent_run_id)
            row = await store.finish_run(
                conn,
                run_id=self.run_id,
                epoch=self.epoch,
                status=status,
                output=output,
                error=error,
                entries=[e.to_json() for e in entries],
                step_count=step_count,
            )
            if row is None:
                raise LeaseLost(self.run_id)
            if self.may_have_waits:
                await store.delete_run_waits(conn, run_id=self.run_id)
            await complete_parent_step(conn, row, self.run_id, status, output, error)
        self._finished(status, row.created_at, row.completed_at, row.parent_run_id)

    def _finished(
        self,
        status: str,
        created_at: datetime | None,
        completed_at: datetime | None,
        parent: str | None,
    ) -> None:
        """After the finishing commit: metrics and hints."""
        metrics.RUNS_COMPLETED.labels(self.workflow, status).inc()
        if created_at is not None and completed_at is not None:
            metrics.RUN_DURATION.labels(self.workflow).observe(
                max(0.0, (completed_at - created_at).total_seconds())
            )
        self.waker.notify(RunFinished(run_id=self.run_id))
        if parent is not None:
            self.waker.notify(RunReady())
        elif self.keyed:
            self.waker.notify(RunReady(workflow=self.workflow))

    async def retry_run(
        self, entries: list[Entry], step_count: int, delay: float, error: dict[str, Any]
    ) -> None:
        async with transaction(self.pool) as conn:
            await self._fence(conn, entries, step_count)
            await store.retry_run(
                conn,
                run_id=self.run_id,
                epoch=self.epoch,
                delay=delay,
                error=error,
                step_count=step_count,
            )
            await store.delete_unfinished_steps(conn, run_id=self.run_id)
            if self.may_have_waits:
                await store.delete_run_waits(conn, run_id=self.run_id)
        if self.keyed:  # its slot is free until the retry is due
            self.waker.notify(RunReady(workflow=self.workflow))
