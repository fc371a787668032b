"""`RunLedger`: what one resume of a run has journaled and still owes a commit.

It holds the run's state and the replay bookkeeping every kind of call shares: the journal
(allocating each call's key, recording entries), the batched, fenced writes that commit them
before anything new begins (the durability invariant, see `engine.py`), the lease those writes
renew, the step budget and deadline, values journaled once (`ctx.now()` and the like), and the
suspension detection (`StallDetector`) that stops the run when every active call is blocked.
Steps (`steps.py`), waits (`waits.py`) and the run's outcome (`engine.py`) build on it. No SQL.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

from ripple.platform.core.logs import get_logger
from ripple.platform.errors import InvalidInput, RippleError, Unavailable
from ripple.workflows import serde
from ripple.workflows.authoring.attributes import encode_attributes
from ripple.workflows.authoring.definition import WorkflowDefinition
from ripple.workflows.errors import (
    JournalUnavailable,
    LeaseLost,
    NonDeterminismError,
    StepFailedError,
    WorkflowFailed,
)
from ripple.workflows.journal import Entry, Journal, StepStatus, current_scope
from ripple.workflows.runtime.ports import RunFacts, RunWriter
from ripple.workflows.runtime.stall import Block, StallDetector

__all__ = ["RunLedger"]

log = get_logger("ripple.workflows")

#: Timers due sooner than this are waited for in memory instead of suspending the run.
INLINE_WAIT = 0.05


@asynccontextmanager
async def journal_write() -> AsyncIterator[None]:
    """Around a journal write the workflow function awaits: a database outage becomes
    `JournalUnavailable`, which the workflow cannot mistake for (or catch as) its own error."""
    try:
        yield
    except Unavailable as exc:
        raise JournalUnavailable(str(exc)) from exc


class RunLedger:
    """The state and journal bookkeeping of one resume of one run."""

    def __init__(
        self,
        facts: RunFacts,
        definition: WorkflowDefinition[Any, Any],
        journal: list[Entry],
        writer: RunWriter,
        *,
        max_steps: int,
        is_stopping: Callable[[], bool],
        resolve: Callable[[str], WorkflowDefinition[Any, Any] | None],
        lease: float = 30.0,
        max_recoveries: int = 100,
    ) -> None:
        self.facts = facts
        self.lease = lease
        #: Loop time until which the lease is known to hold (claim, flushes, heartbeats).
        self._lease_until = asyncio.get_running_loop().time() + lease
        self.run_id = facts.run_id
        self.attempt = facts.attempt
        self.definition = definition
        self.journal = Journal(facts.run_id, journal)
        self.writer = writer
        self.max_steps = max_steps
        self.is_stopping = is_stopping
        self.resolve = resolve
        self.step_count = facts.step_count
        self.max_recoveries = max_recoveries
        #: After a recovery each attempt's start is committed before its body runs, so the
        #: journal names the step a crash-looping run was in when its budget runs out.
        self.careful = facts.recovered
        self._offset = facts.db_now - datetime.now(UTC)
        self._pending: dict[str, Entry] = {}
        self._trims: list[str] = []
        self._flush_lock = asyncio.Lock()
        self._stall = StallDetector(
            clock=self.clock,
            is_stopping=is_stopping,
            stopped=lambda: self._stop_reason is not None,
            on_stall=lambda: self._stop("suspend"),
            on_timers_beside_work=self._commit_beside_timers,
            inline_wait=INLINE_WAIT,
        )
        self._stop_reason: str | None = None
        self._stalled: list[Block] = []
        self._task: asyncio.Task[Any] | None = None
        self._fatal: WorkflowFailed | None = None
        self._compensations: list[tuple[int, str, Callable[..., Any], Any]] = []
        self._background_flush: asyncio.Task[None] | None = None
        #: Set once the outcome is being committed: canceling the task then could tear a commit.
        self.concluding = False
        #: The key approval links are signed with, and the API's public URL they are on
        #: (set by the worker; no key: `approval_url` is refused).
        self.approval_key: bytes | None = None
        self.approval_public_url: str | None = None

    # -- clock and bookkeeping ---------------------------------------------------------------

    def clock(self) -> datetime:
        """Now, on the database clock (local clock plus the offset measured at claim)."""
        return datetime.now(UTC) + self._offset

    def record(self, entry: Entry) -> None:
        """Journal `entry` with the run's next write."""
        self.journal.put(entry)
        self._pending[entry.key] = entry

    def _take(self) -> list[Entry]:
        entries = list(self._pending.values())
        self._pending.clear()
        return entries

    async def flush(self, *, renew: bool = False) -> None:
        """Commit the journal entries not yet written now; with `renew`, also (even with
        nothing to write) extend the lease, which the heartbeat otherwise does."""
        async with self._flush_lock:
            entries = self._take()
            trims, self._trims = self._trims, []
            if entries or trims or renew:
                sent = asyncio.get_running_loop().time()
                try:
                    async with journal_write():
                        await self.writer.flush(entries, self.step_count, trims, renew=renew)
                except BaseException:
                    # Not written: keep them for the next write (unless superseded since).
                    for entry in entries:
                        self._pending.setdefault(entry.key, entry)
                    self._trims[:0] = trims
                    raise
                if renew:
                    self.renew_lease(sent)

    # -- what composition (race, join, loop, patches) uses -------------------------------------

    def trim(self, prefix: str) -> None:
        """Delete the journal entries under `prefix` with the run's next write."""
        if any(key.startswith(prefix) for key in self.journal.by_key):
            self._trims.append(prefix)
            self.journal.forget(prefix)
            for key in [k for k in self._pending if k.startswith(prefix)]:
                del self._pending[key]

    def raise_if_fatal(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    async def settle_race(self, losers: list[str]) -> None:
        """Commit the race's outcome now, with its losing branches' waits and children gone."""
        async with self._flush_lock, journal_write():
            await self.writer.settle_race(self._take(), self.step_count, losers)

    def _unflushed_results(self) -> bool:
        return any(e.finished for e in self._pending.values())

    async def _commit_earlier(self) -> None:
        """The invariant, before a step body or an in-memory timer begins: every result this
        run completed earlier is committed (a commit in flight holds some: wait for it). A
        worker that missed its heartbeats (paused, partitioned) also confirms its lease with
        this fenced write before it starts anything on a lease that may be gone."""
        stale = asyncio.get_running_loop().time() > self._lease_until - self.lease / 2
        if stale or self._flush_lock.locked() or self._unflushed_results():
            await self.flush(renew=stale)

    def _flush_soon(self) -> None:
        """Commit finished results while other steps of this run keep running (a timer began
        beside them); a failure leaves the entries pending for the next write to raise."""
        if self._background_flush is None or self._background_flush.done():
            self._background_flush = asyncio.ensure_future(self._flush_quietly())

    async def _flush_quietly(self) -> None:
        try:
            await self.flush()
        except (LeaseLost, JournalUnavailable, RippleError) as exc:
            log.warning("step_flush_deferred", error=str(exc))

    def renew_lease(self, sent: float) -> None:
        """The lease was extended by a write sent at loop time `sent`."""
        self._lease_until = max(self._lease_until, sent + self.lease)

    def fail_fatal(self, exc: WorkflowFailed) -> WorkflowFailed:
        if self._fatal is None:
            self._fatal = exc
        return self._fatal

    def allocate(self, name: str, kind: str) -> tuple[str, int, Entry | None]:
        """Key, position and recorded entry of the next call `name` in the current scope."""
        if self._fatal is not None:
            raise self._fatal
        if not isinstance(name, str) or not name or name.startswith("$") or "\x00" in name:
            raise InvalidInput(
                f"invalid step name {name!r}: use a non-empty name that does not start with '$' "
                "and has no NUL (U+0000)"
            )
        try:
            return self.journal.allocate(name, kind, current_scope.get())
        except NonDeterminismError as exc:
            raise self.fail_fatal(exc) from None

    def _count_execution(self) -> None:
        self.step_count += 1
        if self.step_count > self.max_steps:
            raise self.fail_fatal(
                WorkflowFailed(
                    self.run_id,
                    {
                        "type": "StepLimitExceeded",
                        "message": f"run {self.run_id} exceeded {self.max_steps} step "
                        "executions (RIPPLE_MAX_STEPS_PER_RUN); look for a runaway loop",
                    },
                )
            )
        deadline = self.facts.deadline
        if deadline is not None and self.clock() >= deadline:
            raise self.fail_fatal(self._deadline_error())

    def _deadline_error(self) -> WorkflowFailed:
        return WorkflowFailed(
            self.run_id,
            {
                "type": "DeadlineExceeded",
                "message": f"run {self.run_id} passed its deadline {self.facts.deadline}",
            },
        )

    # -- suspension detection (see `StallDetector`) -------------------------------------------

    def _enter(self) -> None:
        self._stall.enter()

    def _exit(self) -> None:
        self._stall.exit()

    def _commit_beside_timers(self) -> None:
        # The run does not suspend (other steps are running, or the timer is short), so the
        # suspension will not commit what finished before its timers began: commit it now.
        if self._unflushed_results():
            self._flush_soon()

    async def _block(self, kind: str, key: str, wake_at: datetime | None) -> None:
        if self._stall.is_inline(kind, wake_at):
            await self._commit_earlier()  # a timer waited in memory never suspends the run
        await self._stall.block(kind, key, wake_at)

    async def _gate(self) -> None:
        """Before a new step execution: a stopping worker parks the run instead."""
        if self.is_stopping():
            await self._block("release", "", None)

    def _stop(self, reason: str) -> None:
        if self._stop_reason is None and self._task is not None:
            self._stop_reason = reason
            self._stalled = self._stall.blocks
            self._task.cancel()

    # -- replayed failures and journaled values ----------------------------------------------

    def recorded_failure(self, key: str, error: dict[str, Any]) -> Exception:
        """The exception a replayed failed step raises: its recorded class when importable (so
        `except ValueError` in workflow code behaves as in the first pass), else
        StepFailedError."""
        rebuilt = serde.rebuild_error(error)
        return rebuilt if rebuilt is not None else StepFailedError(key, error)

    def deterministic(self, kind: str, make: Callable[[], Any]) -> Any:
        """A value made once and journaled (`ctx.now()`, `ctx.uuid()`, `ctx.random()`)."""
        if self._fatal is not None:
            raise self._fatal
        try:
            key, seq, entry = self.journal.allocate("$" + kind, kind, current_scope.get())
        except NonDeterminismError as exc:
            raise self.fail_fatal(exc) from None
        if entry is not None and entry.status == StepStatus.COMPLETED:
            return entry.output
        value = make()
        now = self.clock()
        self.record(Entry.recorded(key, seq, kind, value, now))
        return value

    def set_attributes(self, values: dict[str, Any]) -> None:
        """Journal search attributes (indexed by the journal insert): once per call position,
        so a replay writes nothing."""
        encoded = encode_attributes(values, self.definition.attributes)
        if self._fatal is not None:
            raise self._fatal
        try:
            key, seq, entry = self.journal.allocate(
                "$attributes", "attributes", current_scope.get()
            )
        except NonDeterminismError as exc:
            raise self.fail_fatal(exc) from None
        if entry is None:
            self.record(Entry.recorded(key, seq, "attributes", encoded, self.clock()))
