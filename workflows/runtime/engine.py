"""The replay engine: executes one claimed run until it completes, fails or suspends.

The workflow function runs from the top on every resume; each step looks its key up in the
journal (loaded once per resume) and returns the recorded result, or executes and records it.

The durability invariant: a step body, a child start, a wait registration, a timer and a
suspension begin only after every step result this run completed earlier is committed. Steps
started together (`asyncio.gather`) may commit together, and the last step commits with the
run's completion. Writes go through a `RunWriter`, fenced by the claim's epoch; the worker's
writer commits the flushes of all its runs together (group commit), so the invariant costs a
share of a transaction per step, not one each. A run recovered after its worker was lost
while it ran alone (the claim counts those, see `store.claim_runs`) spends a crash budget
(`max_recoveries`), never a step's attempts. No SQL here.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

import structlog
from pydantic import ValidationError

from ripple.platform.core.ids import new_id
from ripple.platform.core.logs import get_logger
from ripple.platform.errors import InvalidInput, RippleError
from ripple.platform.ops import metrics, tracing
from ripple.workflows.authoring import composition
from ripple.workflows.authoring.context import WorkflowContext
from ripple.workflows.authoring.definition import WorkflowDefinition, check_workflow_name
from ripple.workflows.authoring.retry import RetryPolicy, seconds
from ripple.workflows.errors import (
    LeaseLost,
    NonDeterminismError,
    NonRetriableError,
    RetryAfterError,
    RollbackError,
    StepFailedError,
    StepTimeoutError,
    WorkflowError,
    WorkflowFailed,
)
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runtime import serde
from ripple.workflows.runtime.bodies import call_body, observe_step
from ripple.workflows.runtime.journal import Entry, Journal, StepStatus, current_scope
from ripple.workflows.runtime.stall import Block, StallDetector

__all__ = [
    "DEFAULT_STEP_RETRY",
    "ChildSpec",
    "Outcome",
    "RunExecution",
    "RunWriter",
    "WaitSpec",
]

log = get_logger("ripple.workflows")

DEFAULT_STEP_RETRY = RetryPolicy()
#: Timers due sooner than this are waited for in memory instead of suspending the run.
INLINE_WAIT = 0.05
INFINITY = datetime.max.replace(tzinfo=UTC)


class RunFacts(Protocol):
    """What the engine needs to know about the claim it executes."""

    @property
    def run_id(self) -> str: ...
    @property
    def workflow(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def input(self) -> Any: ...
    @property
    def attempt(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def deadline(self) -> datetime | None: ...
    @property
    def trace(self) -> dict[str, str] | None: ...
    @property
    def step_count(self) -> int: ...
    @property
    def recovered(self) -> bool: ...
    @property
    def recoveries(self) -> int: ...
    @property
    def db_now(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class WaitSpec:
    """A new durable wait."""

    entry: Entry
    name: str
    event: str | None
    match: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """A child run to create idempotently, under `key`: `{parent_run_id}:{step_key}`, and
    `...:attempt-{n}` from the parent's second attempt on (a retry starts a fresh child for
    a child step that did not complete)."""

    entry: Entry
    run_id: str
    workflow: str
    version: int | None
    input: Any
    key: str


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an execution ended: a terminal or suspended status, and when it is due again."""

    status: str
    wake_at: datetime | None = None


class RunWriter(Protocol):
    """Durable, fenced writes of one claimed run; each call is one transaction that first
    commits `entries` (batched journal writes). Raise `LeaseLost` when fenced out."""

    async def flush(
        self,
        entries: list[Entry],
        step_count: int,
        trim: Sequence[str] = (),
        *,
        renew: bool = False,
    ) -> None:
        """Commit `entries`, and delete the journal entries under the `trim` key prefixes.
        With `renew`, also extend the run's lease (else the heartbeat does)."""
        ...

    async def settle_race(
        self, entries: list[Entry], step_count: int, losers: Sequence[str]
    ) -> list[str]:
        """Commit `entries` (the race's outcome among them), drop the waits of the losing
        branches (key prefixes) and cancel the child runs they started."""
        ...

    async def register_wait(
        self, entries: list[Entry], step_count: int, wait: WaitSpec
    ) -> tuple[bool, Any]: ...

    async def start_child(self, entries: list[Entry], step_count: int, child: ChildSpec) -> Entry:
        """Create the child and journal the step; returns the step's entry (pending on the
        child, or its result if the child existed and ended)."""
        ...

    async def time_out(
        self, entries: list[Entry], step_count: int, entry: Entry, is_wait: bool
    ) -> Entry: ...

    async def suspend(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        wake_at: datetime,
        blocking_keys: list[str],
    ) -> datetime:
        """Park the run; returns when it is available again (now if a wait already resolved)."""
        ...

    async def finish(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        output: Any,
        error: dict[str, Any] | None,
    ) -> None: ...

    async def retry_run(
        self, entries: list[Entry], step_count: int, delay: float, error: dict[str, Any]
    ) -> None: ...


def _as_utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _takes_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )


class RunExecution:
    """One resume of one run: replay, execute, record, then complete, fail or suspend."""

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

    # -- clock and bookkeeping ---------------------------------------------------------------

    def clock(self) -> datetime:
        """Now, on the database clock (local clock plus the offset measured at claim)."""
        return datetime.now(UTC) + self._offset

    def _record(self, entry: Entry) -> None:
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

    def allocate(self, name: str, kind: str) -> tuple[str, int, Entry | None]:
        """Key, position and recorded entry of the next call `name` in the current scope."""
        return self._allocate(name, kind)

    def record(self, entry: Entry) -> None:
        """Journal `entry` with the run's next write."""
        self._record(entry)

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

    def fail_fatal(self, exc: WorkflowFailed) -> WorkflowFailed:
        return self._fail_fatal(exc)

    def recorded_failure(self, key: str, error: dict[str, Any]) -> Exception:
        return self._recorded_failure(key, error)

    async def settle_race(self, losers: list[str]) -> None:
        """Commit the race's outcome now, with its losing branches' waits and children gone."""
        async with self._flush_lock:
            await self.writer.settle_race(self._take(), self.step_count, losers)

    async def race(self, name: str, branches: Mapping[str, Callable[[], Awaitable[Any]]]) -> Any:
        return await composition.race(self, name, branches)

    async def join(self, name: str, branches: Mapping[str, Callable[[], Awaitable[Any]]]) -> Any:
        return await composition.join(self, name, branches)

    async def loop(self, ctx: WorkflowContext, name: str, body: Any, state: Any, keep: int) -> Any:
        return await composition.loop(self, ctx, name, body, state, keep)

    def removed(self, name: str) -> None:
        composition.removed(self, name)

    def patched(self, change_id: str) -> bool:
        return composition.patched(self, change_id)

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
        except (LeaseLost, RippleError) as exc:
            log.warning("step_flush_deferred", error=str(exc))

    def renew_lease(self, sent: float) -> None:
        """The lease was extended by a write sent at loop time `sent`."""
        self._lease_until = max(self._lease_until, sent + self.lease)

    def _fail_fatal(self, exc: WorkflowFailed) -> WorkflowFailed:
        if self._fatal is None:
            self._fatal = exc
        return self._fatal

    def _allocate(self, name: str, kind: str) -> tuple[str, int, Entry | None]:
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
            raise self._fail_fatal(exc) from None

    def _count_execution(self) -> None:
        self.step_count += 1
        if self.step_count > self.max_steps:
            raise self._fail_fatal(
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
            raise self._fail_fatal(self._deadline_error())

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

    # -- steps -------------------------------------------------------------------------------

    async def run_step(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        retry: RetryPolicy | None,
        compensate: Callable[..., Any] | None,
        timeout: timedelta | float | None,
        kind: str = "run",
    ) -> Any:
        key, seq, entry = self._allocate(name, kind)
        annotation = serde.return_annotation(fn)
        self._enter()
        try:
            if entry is not None and entry.status == StepStatus.COMPLETED:
                try:
                    value = serde.load(entry.output, annotation)
                except ValidationError:
                    value = entry.output
                self._register_compensation(seq, key, compensate, value)
                return value
            if entry is not None and entry.status == StepStatus.FAILED:
                raise self._recorded_failure(key, entry.error or {})
            value = await self._execute(key, seq, kind, entry, fn, args, kwargs, retry, timeout)
            self._register_compensation(seq, key, compensate, value)
            return value
        finally:
            self._exit()

    def _recorded_failure(self, key: str, error: dict[str, Any]) -> Exception:
        """The exception a replayed failed step raises: its recorded class when importable (so
        `except ValueError` in workflow code behaves as in the first pass), else
        StepFailedError."""
        rebuilt = serde.rebuild_error(error)
        return rebuilt if rebuilt is not None else StepFailedError(key, error)

    async def _execute(
        self,
        key: str,
        seq: int,
        kind: str,
        entry: Entry | None,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: RetryPolicy | None,
        timeout: timedelta | float | None,
    ) -> Any:
        policy = retry or DEFAULT_STEP_RETRY
        attempts = entry.attempts if entry is not None else 0
        if entry is not None and entry.status == StepStatus.RUNNING:
            attempts -= 1  # that attempt's worker was lost: a crash is not the step's error
        last_error = entry.error if entry is not None else None
        started_at = self.clock()
        if entry is not None and entry.status == StepStatus.RETRYING and entry.due_at is not None:
            await self._block("retry", key, entry.due_at)
        while True:
            attempt = attempts + 1
            if not policy.allows(attempt):
                error = last_error or {
                    "type": "WorkerLost",
                    "message": f"step {key!r} started {attempts} time(s) without recording a "
                    "result (its worker died or lost its lease); attempt budget exhausted",
                }
                lost = Entry.attempt(key, seq, kind, attempts, started_at)
                self._record(lost.failed(error, self.clock(), attempts=attempts))
                raise StepFailedError(key, error)
            await self._gate()
            self._count_execution()
            started_at = self.clock()
            running = Entry.attempt(key, seq, kind, attempt, started_at)
            self._record(running)
            if self.careful:
                await self.flush()
            else:
                await self._commit_earlier()
            t0 = asyncio.get_running_loop().time()
            tokens = structlog.contextvars.bind_contextvars(step=key)
            try:
                if tracing.recording():
                    with tracing.span("workflow.step", parent=self.facts.trace, step=key):
                        result = await call_body(fn, args, kwargs, timeout)
                else:
                    result = await call_body(fn, args, kwargs, timeout)
                output = serde.dump(result, serde.return_annotation(fn))
            except (asyncio.CancelledError, LeaseLost):
                raise
            except Exception as exc:
                observe_step(self.facts.workflow, key, asyncio.get_running_loop().time() - t0)
                error = serde.error_json(exc)
                retryable = (
                    not isinstance(exc, NonRetriableError | RollbackError | WorkflowError)
                    and policy.is_retryable(exc)
                    and policy.allows(attempt + 1)
                )
                if not retryable:
                    self._record(running.failed(error, self.clock(), attempts=attempt))
                    raise
                delay = exc.delay if isinstance(exc, RetryAfterError) else policy.delay(attempt)
                due = self.clock() + timedelta(seconds=delay)
                self._record(running.retrying(attempt, error, due))
                metrics.STEP_RETRIES.labels(self.facts.workflow).inc()
                log.info("step_retry_scheduled", step=key, attempt=attempt, delay=delay)
                await self._block("retry", key, due)
                attempts, last_error = attempt, error
                continue
            finally:
                structlog.contextvars.reset_contextvars(**tokens)
            observe_step(self.facts.workflow, key, asyncio.get_running_loop().time() - t0)
            self._record(running.completed(output, self.clock(), attempts=attempt))
            return result

    def _register_compensation(
        self, seq: int, key: str, compensate: Callable[..., Any] | None, value: Any
    ) -> None:
        if compensate is not None:
            self._compensations.append((seq, key, compensate, value))

    async def sleep(
        self, name: str, *, duration: timedelta | float | None = None, until: datetime | None = None
    ) -> None:
        key, seq, entry = self._allocate(name, "sleep")
        self._enter()
        try:
            if entry is not None and entry.status == StepStatus.COMPLETED:
                return
            if entry is None or entry.due_at is None:
                self._count_execution()
                now = self.clock()
                due = (
                    _as_utc(until)
                    if until is not None
                    else now + timedelta(seconds=seconds(duration or 0))
                )
                entry = Entry.begun(key, seq, "sleep", now, due_at=due)
                self._record(entry)
            assert entry.due_at is not None
            if entry.due_at > self.clock():
                await self._block("sleep", key, entry.due_at)
            self._record(entry.completed(None, self.clock()))
        finally:
            self._exit()

    async def wait_for_event(
        self,
        name: str,
        *,
        event: str | None,
        match: dict[str, Any] | None,
        timeout: timedelta | float | None,
    ) -> dict[str, Any] | None:
        if match is not None and not isinstance(match, dict):
            raise InvalidInput("wait_for_event match must be a dict (or None for any payload)")
        key, seq, entry = self._allocate(name, "wait")
        self._enter()
        try:
            if entry is not None and entry.finished:
                result: dict[str, Any] | None = entry.output
                return result
            if entry is None:
                self._count_execution()
                now = self.clock()
                expires = None if timeout is None else now + timedelta(seconds=seconds(timeout))
                entry = Entry.begun(key, seq, "wait", now, due_at=expires)
                self.journal.put(entry)
                async with self._flush_lock:
                    found, payload = await self.writer.register_wait(
                        self._take(), self.step_count, WaitSpec(entry, name, event, match)
                    )
                if found:
                    self.journal.put(Entry.begun(key, seq, "wait", now).completed(payload, now))
                    resolved: dict[str, Any] | None = payload
                    return resolved
            await self._block("wait", key, entry.due_at)
            final = await self._time_out(entry, is_wait=True)
            timed_out: dict[str, Any] | None = final.output
            return timed_out
        finally:
            self._exit()

    async def _time_out(self, entry: Entry, *, is_wait: bool) -> Entry:
        async with self._flush_lock:
            final = await self.writer.time_out(self._take(), self.step_count, entry, is_wait)
        self.journal.put(final)
        return final

    async def run_child(
        self,
        workflow: WorkflowDefinition[Any, Any] | str,
        input: Any,
        *,
        name: str | None,
        timeout: timedelta | float | None,
    ) -> Any:
        definition = workflow if isinstance(workflow, WorkflowDefinition) else None
        wf_name = definition.name if definition else check_workflow_name(str(workflow))
        if definition is None:
            definition = self.resolve(wf_name)
        key, seq, entry = self._allocate(name or wf_name, "child")
        output_type = definition.output_type if definition is not None else serde.NO_TYPE
        self._enter()
        try:
            if entry is None:
                entry = await self._start_child(key, seq, wf_name, definition, input, timeout)
            if entry.status == StepStatus.PENDING:
                await self._block("child", key, entry.due_at)
                entry = await self._time_out(entry, is_wait=False)
            if entry.status == StepStatus.FAILED:
                raise self._child_error(entry)
            try:
                return serde.load(entry.output, output_type)
            except ValidationError:
                return entry.output
        finally:
            self._exit()

    async def _start_child(
        self,
        key: str,
        seq: int,
        wf_name: str,
        definition: WorkflowDefinition[Any, Any] | None,
        input: Any,
        timeout: timedelta | float | None,
    ) -> Entry:
        self._count_execution()
        if definition is not None and definition.takes_input:
            try:
                child_input = serde.validate(input, definition.input_type)
            except ValidationError as exc:
                raise InvalidInput(f"invalid input for child workflow {wf_name}: {exc}") from exc
        else:
            child_input = serde.dump(input)
        now = self.clock()
        expires = None if timeout is None else now + timedelta(seconds=seconds(timeout))
        child_id = new_id()
        entry = Entry.begun(key, seq, "child", now, output={"runId": child_id}, due_at=expires)
        self.journal.put(entry)
        version = definition.version if definition is not None else None
        idempotency = f"{self.run_id}:{key}"
        if self.attempt > 1:
            idempotency += f":attempt-{self.attempt}"
        spec = ChildSpec(entry, child_id, wf_name, version, child_input, idempotency)
        async with self._flush_lock:
            entry = await self.writer.start_child(self._take(), self.step_count, spec)
        self.journal.put(entry)
        return entry

    def _child_error(self, entry: Entry) -> Exception:
        error = entry.error or {}
        child_id = (entry.output or {}).get("runId", "?") if isinstance(entry.output, dict) else "?"
        if error.get("type") == "StepTimeout":
            return StepTimeoutError(str(error.get("message")))
        return WorkflowFailed(child_id, error)

    def deterministic(self, kind: str, make: Callable[[], Any]) -> Any:
        """A value made once and journaled (`ctx.now()`, `ctx.uuid()`, `ctx.random()`)."""
        if self._fatal is not None:
            raise self._fatal
        try:
            key, seq, entry = self.journal.allocate("$" + kind, kind, current_scope.get())
        except NonDeterminismError as exc:
            raise self._fail_fatal(exc) from None
        if entry is not None and entry.status == StepStatus.COMPLETED:
            return entry.output
        value = make()
        now = self.clock()
        self._record(Entry.recorded(key, seq, kind, value, now))
        return value

    # -- the run -----------------------------------------------------------------------------

    async def _call_workflow(self, ctx: WorkflowContext, value: Any) -> Any:
        fn = self.definition.fn
        try:
            result = await (fn(ctx, value) if self.definition.takes_input else fn(ctx))
        except Exception as exc:
            if self._fatal is None and self._compensations and not self._will_retry(exc):
                await self._compensate()
            raise
        if self._fatal is not None:
            raise self._fatal
        return result

    def _will_retry(self, exc: BaseException) -> bool:
        policy = self.definition.retry
        return (
            self._fatal is None
            and not isinstance(exc, RollbackError | NonRetriableError)
            and policy.is_retryable(exc)
            and policy.allows(self.attempt + 1)
        )

    async def _compensate(self) -> None:
        for _seq, key, fn, value in sorted(self._compensations, key=lambda c: c[0], reverse=True):
            args = (value,) if _takes_argument(fn) else ()
            await self.run_step(
                f"compensate:{key}",
                fn,
                args,
                {},
                retry=None,
                compensate=None,
                timeout=None,
                kind="compensate",
            )

    async def execute(self) -> Outcome:
        """Run until completion, failure or suspension; commit the outcome."""
        deadline = self.facts.deadline
        if deadline is not None and self.facts.db_now >= deadline:
            return await self._fail(self._deadline_error().error)
        if self.facts.recovered and self.facts.recoveries > self.max_recoveries:
            return await self._fail(self._worker_lost_error())
        try:
            value = (
                serde.load(self.facts.input, self.definition.input_type)
                if self.definition.takes_input
                else None
            )
        except ValidationError as exc:
            error = {
                "type": "InvalidInput",
                "message": f"input does not match {self.definition.name}'s input type: {exc}",
            }
            return await self._fail(error)
        ctx = WorkflowContext(self, self.run_id, self.definition.name, self.facts.version, value)
        # The workflow runs in this task; a stall (every active step blocked) or the deadline
        # cancels it with `_stop_reason` set, which tells those apart from an outside cancel
        # (run canceled, lease lost, worker shutdown), which propagates.
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        timer = None
        if deadline is not None:
            limit = max(0.0, (deadline - self.clock()).total_seconds())
            timer = asyncio.get_running_loop().call_later(limit, self._stop, "deadline")
        result: Any = None
        failure: BaseException | None = None
        try:
            result = await self._call_workflow(ctx, value)
        except asyncio.CancelledError:
            if self._stop_reason is None:
                raise
            task.uncancel()
        except Exception as exc:
            failure = exc
        finally:
            if timer is not None:
                timer.cancel()
        self.concluding = True
        if self._stop_reason == "suspend":
            return await self._park(self._stalled)
        if self._stop_reason == "deadline":
            return await self._fail(self._deadline_error().error)
        return await self._conclude(result, failure)

    def _worker_lost_error(self) -> dict[str, Any]:
        running = [e.key for e in self.journal.by_key.values() if e.status == StepStatus.RUNNING]
        where = f"; step(s) {', '.join(map(repr, running))} were running" if running else ""
        return {
            "type": "WorkerLost",
            "message": f"run {self.run_id} lost its worker {self.facts.recoveries} times while "
            f"it ran alone (killed, out of memory, or stalled past its lease){where}; crash "
            f"budget of {self.max_recoveries} recoveries (RIPPLE_MAX_RECOVERIES) exhausted",
        }

    def _stop(self, reason: str) -> None:
        if self._stop_reason is None and self._task is not None:
            self._stop_reason = reason
            self._stalled = self._stall.blocks
            self._task.cancel()

    async def _conclude(self, result: Any, exc: BaseException | None) -> Outcome:
        if exc is None:
            try:
                output = serde.dump(result, self.definition.output_type)
            except Exception as dump_exc:
                return await self._fail(serde.error_json(dump_exc))
            await self.writer.finish(
                self._take(), self.step_count, RunStatus.COMPLETED, output, None
            )
            return Outcome(RunStatus.COMPLETED)
        if self._fatal is not None:
            return await self._fail(self._fatal.error)
        error = exc.error if isinstance(exc, StepFailedError) else serde.error_json(exc)
        if self._will_retry(exc):
            delay = self.definition.retry.delay(self.attempt)
            await self.writer.retry_run(self._take(), self.step_count, delay, error)
            log.info("run_retry_scheduled", attempt=self.attempt, delay=delay)
            return Outcome(RunStatus.PENDING, self.clock() + timedelta(seconds=delay))
        return await self._fail(error)

    async def _fail(self, error: dict[str, Any]) -> Outcome:
        await self.writer.finish(self._take(), self.step_count, RunStatus.FAILED, None, error)
        return Outcome(RunStatus.FAILED)

    async def _park(self, blocks: list[Block]) -> Outcome:
        kinds = {b.kind for b in blocks}
        wakes = [b.wake_at for b in blocks if b.wake_at is not None]
        wake_at = min(wakes) if wakes else INFINITY
        if "release" in kinds:
            wake_at = self.clock()
        if self.facts.deadline is not None:
            wake_at = min(wake_at, self.facts.deadline)
        if kinds & {"wait", "child"}:
            status = RunStatus.WAITING
        elif kinds <= {"release"}:
            status = RunStatus.PENDING
        else:
            status = RunStatus.SLEEPING
        keys = [b.key for b in blocks if b.kind in ("wait", "child")]
        wake_at = await self.writer.suspend(self._take(), self.step_count, status, wake_at, keys)
        return Outcome(status, wake_at)
