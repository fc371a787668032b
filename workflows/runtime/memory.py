"""`MemoryRuns`: the engine's journal/writer port (`RunWriter`) kept in dicts, with the run
state behind it, so workflow logic is tested at unit speed without Postgres or Redis.

It is a real implementation of the port, not a recorder: each write is fenced by the epoch of
the claim that makes it (a stale execution gets `LeaseLost`, as from `PgRunWriter`), only what
a write committed is in the journal, and a claim of a run whose execution was lost counts as
a recovery. A test can `crash` an execution mid-step and execute the run again from its
recorded journal. Time is simulated: `run_until_idle` moves `now` to the next due timer instead
of sleeping. Rules mirror the workflow store's statements; no I/O here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from ripple.platform.core.ids import new_id
from ripple.platform.errors import Conflict, NotFound
from ripple.workflows import serde
from ripple.workflows.authoring.definition import WorkflowDefinition
from ripple.workflows.errors import LeaseLost
from ripple.workflows.journal import Entry, StepStatus
from ripple.workflows.runs.records import ACTIVE, RunStatus
from ripple.workflows.runtime.engine import INFINITY, RunExecution
from ripple.workflows.runtime.ports import (
    ChildSpec,
    Outcome,
    WaitSpec,
    child_timeout_error,
    existing_child_entry,
)

__all__ = ["MemoryClaim", "MemoryRun", "MemoryRunWriter", "MemoryRuns"]

#: Statuses of a run no execution holds.
_PARKED = frozenset({RunStatus.PENDING, RunStatus.SLEEPING, RunStatus.WAITING})
#: Where simulated time starts unless a test says otherwise.
EPOCH_START = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class MemoryRun:
    """One run's durable state: what `ripple_runs`, its journal, waits and inbox hold."""

    run_id: str
    workflow: str
    version: int
    input: Any
    available_at: datetime
    status: str = RunStatus.PENDING
    attempt: int = 1
    epoch: int = 0
    step_count: int = 0
    recoveries: int = 0
    output: Any = None
    error: dict[str, Any] | None = None
    parent_run_id: str | None = None
    parent_step_key: str | None = None
    parent_step_seq: int | None = None
    idempotency_key: str | None = None
    #: Committed journal entries by key.
    journal: dict[str, Entry] = field(default_factory=dict)
    #: Open waits by step key.
    waits: dict[str, WaitSpec] = field(default_factory=dict)
    #: Signals no wait consumed yet: (name, payload), oldest first.
    inbox: list[tuple[str, Any]] = field(default_factory=list)
    deadline: datetime | None = None

    @property
    def entries(self) -> list[Entry]:
        """The committed journal in call order."""
        return sorted(self.journal.values(), key=lambda e: e.seq)


@dataclass(frozen=True, slots=True)
class MemoryClaim:
    """A claim of a run (the engine's `RunFacts`)."""

    run_id: str
    workflow: str
    version: int
    input: Any
    attempt: int
    epoch: int
    step_count: int
    recovered: bool
    recoveries: int
    db_now: datetime
    deadline: datetime | None = None
    trace: dict[str, str] | None = None


def _contains(payload: Any, match: dict[str, Any] | None) -> bool:
    """Whether `payload` contains `match`, as Postgres `payload @> match` decides."""
    return match is None or _json_contains(payload, match)


def _json_contains(got: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(got, dict) and all(
            key in got and _json_contains(got[key], value) for key, value in want.items()
        )
    if isinstance(want, list):
        return isinstance(got, list) and all(
            any(_json_contains(item, w) for item in got) for w in want
        )
    if isinstance(got, bool) or isinstance(want, bool):
        return got is want  # jsonb keeps booleans apart from numbers
    return bool(got == want)  # numbers by value (1 matches 1.0, as in jsonb)


class MemoryRunWriter:
    """The `RunWriter` of one claim: every write first checks that the claim still owns the
    run (same epoch, still running) and raises `LeaseLost` otherwise."""

    def __init__(self, runs: MemoryRuns, run_id: str, epoch: int) -> None:
        self.runs = runs
        self.run_id = run_id
        self.epoch = epoch

    def _fence(self, entries: Iterable[Entry], step_count: int) -> MemoryRun:
        run = self.runs.run(self.run_id)
        if run.epoch != self.epoch or run.status != RunStatus.RUNNING:
            raise LeaseLost(self.run_id)
        self.runs.upsert(run, entries)
        run.step_count = step_count
        return run

    async def flush(
        self,
        entries: list[Entry],
        step_count: int,
        trim: Sequence[str] = (),
        *,
        renew: bool = False,
    ) -> None:
        run = self._fence(entries, step_count)
        for prefix in trim:
            for key in [k for k in run.journal if k.startswith(prefix)]:
                del run.journal[key]

    async def settle_race(
        self, entries: list[Entry], step_count: int, losers: Sequence[str]
    ) -> list[str]:
        run = self._fence(entries, step_count)
        prefixes = tuple(losers)
        for key in [k for k in run.waits if k.startswith(prefixes)]:
            del run.waits[key]
        children = [
            r.run_id
            for r in self.runs.runs.values()
            if r.parent_run_id == self.run_id
            and (r.parent_step_key or "").startswith(prefixes)
            and r.status in ACTIVE
        ]
        return self.runs.cancel_trees(children, reason="its branch lost a race", settle=False)

    async def check_match(self, event: str, match: dict[str, Any]) -> None:
        """No topic schemas in memory: every match is accepted."""

    async def register_wait(
        self, entries: list[Entry], step_count: int, wait: WaitSpec
    ) -> tuple[bool, Any]:
        run = self._fence([*entries, wait.entry], step_count)
        for i, (name, payload) in enumerate(run.inbox):
            if name == wait.name and _contains(payload, wait.match):
                del run.inbox[i]
                self.runs.upsert(run, [wait.entry.completed(payload, wait.entry.started_at)])
                return True, payload
        run.waits[wait.entry.key] = wait
        return False, None

    async def start_child(self, entries: list[Entry], step_count: int, child: ChildSpec) -> Entry:
        run = self._fence([*entries, child.entry], step_count)
        entry = child.entry
        existing = self.runs.find_child(child.workflow, child.key)
        if existing is None:
            self.runs.add(
                MemoryRun(
                    run_id=child.run_id,
                    workflow=child.workflow,
                    version=child.version or self.runs.definition(child.workflow).version,
                    input=child.input,
                    available_at=self.runs.now,
                    parent_run_id=self.run_id,
                    parent_step_key=entry.key,
                    parent_step_seq=entry.seq,
                    idempotency_key=child.key,
                )
            )
            return entry
        entry = existing_child_entry(
            entry, existing.run_id, existing.status, existing.output, existing.error
        )
        self.runs.upsert(run, [entry])
        return run.journal[entry.key]

    async def time_out(
        self, entries: list[Entry], step_count: int, entry: Entry, is_wait: bool
    ) -> Entry:
        run = self._fence(entries, step_count)
        recorded = run.journal.get(entry.key)
        if recorded is not None and recorded.finished:
            return recorded
        if is_wait:
            if run.waits.pop(entry.key, None) is None:
                return recorded or entry
            final = entry.completed(None, self.runs.now)
        else:
            error = child_timeout_error(self.run_id, entry.key)
            final = entry.failed(error, self.runs.now, output=entry.output)
        run.journal[entry.key] = final
        return final

    async def suspend(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        wake_at: datetime,
        blocking_keys: list[str],
    ) -> datetime:
        run = self._fence(entries, step_count)
        resolved = any(
            (e := run.journal.get(key)) is not None and e.finished for key in blocking_keys
        )
        run.status = status
        run.available_at = self.runs.now if resolved else wake_at
        return run.available_at

    async def finish(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        output: Any,
        error: dict[str, Any] | None,
    ) -> None:
        run = self._fence(entries, step_count)
        run.status, run.output, run.error = status, output, error
        run.waits.clear()
        self.runs.report_to_parent(run)

    async def retry_run(
        self, entries: list[Entry], step_count: int, delay: float, error: dict[str, Any]
    ) -> None:
        run = self._fence(entries, step_count)
        run.status = RunStatus.PENDING
        run.attempt += 1
        run.error = error
        run.available_at = self.runs.now + timedelta(seconds=delay)
        # A new attempt re-executes every step without a recorded result.
        run.journal = {k: e for k, e in run.journal.items() if e.status == StepStatus.COMPLETED}
        run.waits.clear()


class MemoryRuns:
    """Runs of some workflows kept in memory, and the executions that claim them.

    Args:
        definitions: the workflows these runs may be of (children too).
        max_steps: step executions per run before it fails (`RIPPLE_MAX_STEPS_PER_RUN`).
        max_recoveries: the crash budget (`RIPPLE_MAX_RECOVERIES`).
        now: where simulated time starts.
    """

    def __init__(
        self,
        definitions: Iterable[WorkflowDefinition[Any, Any]],
        *,
        max_steps: int = 1000,
        max_recoveries: int = 100,
        now: datetime = EPOCH_START,
    ) -> None:
        self.definitions = {d.name: d for d in definitions}
        self.max_steps = max_steps
        self.max_recoveries = max_recoveries
        #: Simulated time: what the database clock reads at the next claim.
        self.now = now
        self.runs: dict[str, MemoryRun] = {}
        self._tasks: dict[str, asyncio.Task[Outcome]] = {}

    # -- the state ---------------------------------------------------------------------------

    def definition(self, workflow: str) -> WorkflowDefinition[Any, Any]:
        try:
            return self.definitions[workflow]
        except KeyError:
            raise NotFound(
                f"no workflow {workflow!r} in this MemoryRuns: pass its definition"
            ) from None

    def run(self, run_id: str) -> MemoryRun:
        """The run `run_id`; raises NotFound."""
        try:
            return self.runs[run_id]
        except KeyError:
            raise NotFound(f"no run {run_id}: check the run id") from None

    def add(self, run: MemoryRun) -> None:
        self.runs[run.run_id] = run

    def find_child(self, workflow: str, key: str) -> MemoryRun | None:
        return next(
            (r for r in self.runs.values() if r.workflow == workflow and r.idempotency_key == key),
            None,
        )

    def upsert(self, run: MemoryRun, entries: Iterable[Entry]) -> None:
        """Journal `entries`; a completed or failed entry is never changed again."""
        for entry in entries:
            recorded = run.journal.get(entry.key)
            if recorded is None or not recorded.finished:
                run.journal[entry.key] = entry

    def report_to_parent(self, run: MemoryRun) -> None:
        """Record a run's end as its parent's step result and make the parent available."""
        if run.parent_run_id is None:
            return
        assert run.parent_step_key is not None
        assert run.parent_step_seq is not None
        parent = self.run(run.parent_run_id)
        pending = Entry(run.parent_step_key, run.parent_step_seq, "child", StepStatus.PENDING)
        if run.status == RunStatus.COMPLETED:
            entry = pending.completed(run.output, self.now)
        else:
            entry = pending.failed(run.error, self.now, output={"runId": run.run_id})
        self.upsert(parent, [entry])
        if parent.status in (RunStatus.WAITING, RunStatus.SLEEPING):
            parent.available_at = self.now

    # -- what callers do ---------------------------------------------------------------------

    def start(
        self,
        workflow: WorkflowDefinition[Any, Any] | str,
        input: Any = None,
        *,
        run_id: str = "",
        deadline: datetime | None = None,
    ) -> str:
        """Create a pending run, available now; its id. A run with a `deadline` fails once
        simulated time reaches it (`DeadlineExceeded`)."""
        name = workflow if isinstance(workflow, str) else workflow.name
        definition = self.definition(name)
        run = MemoryRun(
            run_id=run_id or new_id(),
            workflow=name,
            version=definition.version,
            input=serde.dump(input),
            available_at=self.now,
            deadline=deadline,
        )
        self.add(run)
        return run.run_id

    def signal(self, run_id: str, name: str, payload: Any = None) -> bool:
        """Resolve the run's earliest wait `name` whose match `payload` contains (True), or
        keep the signal in its inbox for the first later matching wait (False)."""
        run = self.run(run_id)
        payload = {} if payload is None else serde.dump(payload)
        waits = sorted(run.waits.values(), key=lambda w: w.entry.seq)
        for wait in waits:
            if wait.name == name and _contains(payload, wait.match):
                del run.waits[wait.entry.key]
                self.upsert(run, [wait.entry.completed(payload, self.now)])
                if run.status in (RunStatus.WAITING, RunStatus.SLEEPING):
                    run.available_at = self.now
                return True
        run.inbox.append((name, payload))
        return False

    def cancel(self, run_id: str) -> bool:
        """Cancel a run and its active descendants; True if the run was still active."""
        self.run(run_id)  # NotFound for an unknown id
        return run_id in self.cancel_trees([run_id])

    def cancel_trees(
        self, run_ids: Sequence[str], *, reason: str | None = None, settle: bool = True
    ) -> list[str]:
        """Cancel runs and their active descendants (each fenced: its epoch moves on); with
        `settle`, a canceled run whose parent stays active fails its parent's step."""
        tree = list(run_ids)
        for run_id in tree:  # grows while it is walked: breadth first
            tree += [r.run_id for r in self.runs.values() if r.parent_run_id == run_id]
        canceled = []
        for run_id in dict.fromkeys(tree):
            run = self.run(run_id)
            if run.status not in ACTIVE:
                continue
            message = f"run {run_id} was canceled" + (f": {reason}" if reason else "")
            run.status = RunStatus.CANCELED
            run.error = {"type": "WorkflowCanceled", "message": message}
            run.epoch += 1
            run.waits.clear()
            canceled.append(run_id)
        if settle:
            for run_id in canceled:
                run = self.runs[run_id]
                if run.parent_run_id not in canceled:
                    self.report_to_parent(run)
        return canceled

    # -- executions --------------------------------------------------------------------------

    def claim(self, run_id: str) -> MemoryClaim:
        """Claim the run (any state but terminal): a new epoch fences every earlier claim; a
        run found running lost its execution, and counts as a recovery."""
        run = self.run(run_id)
        if run.status not in ACTIVE:
            raise Conflict(f"run {run_id} is {run.status}: only active runs can be claimed")
        recovered = run.status == RunStatus.RUNNING
        if recovered:
            run.recoveries += 1
        run.status = RunStatus.RUNNING
        run.epoch += 1
        return MemoryClaim(
            run_id=run.run_id,
            workflow=run.workflow,
            version=run.version,
            input=run.input,
            attempt=run.attempt,
            epoch=run.epoch,
            step_count=run.step_count,
            recovered=recovered,
            recoveries=run.recoveries,
            db_now=self.now,
            deadline=run.deadline,
        )

    def begin(self, run_id: str) -> asyncio.Task[Outcome]:
        """Claim the run and execute it from its committed journal in a task of its own."""
        claim = self.claim(run_id)
        run = self.runs[run_id]
        engine = RunExecution(
            claim,
            self.definition(run.workflow),
            [replace(e) for e in run.entries],
            MemoryRunWriter(self, run_id, claim.epoch),
            max_steps=self.max_steps,
            is_stopping=lambda: False,
            resolve=self.definitions.get,
            max_recoveries=self.max_recoveries,
        )
        task = asyncio.get_running_loop().create_task(engine.execute())
        self._tasks[run_id] = task
        return task

    async def execute(self, run_id: str) -> Outcome:
        """Claim and execute the run once: until it ends or suspends."""
        return await self.begin(run_id)

    async def crash(self, run_id: str) -> None:
        """Lose the run's execution in flight as a killed worker would: whatever it did not
        commit is gone, and the run stays `running` until a claim recovers it."""
        task = self._tasks.pop(run_id, None)
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def due(self) -> list[MemoryRun]:
        """Runs a worker would claim now (a run left `running` has lost its execution)."""
        lost = [
            r
            for r in self.runs.values()
            if r.status == RunStatus.RUNNING
            and (r.run_id not in self._tasks or self._tasks[r.run_id].done())
        ]
        parked = [
            r for r in self.runs.values() if r.status in _PARKED and r.available_at <= self.now
        ]
        return sorted(lost + parked, key=lambda r: (r.available_at, r.run_id))

    async def run_until_idle(self, *, limit: int = 1000) -> int:
        """Execute due runs one at a time, moving simulated time to the next timer whenever
        none is due, until every run ended or waits for something outside (a signal); the
        count of executions. Raises RuntimeError past `limit` executions (a run that never
        settles)."""
        executions = 0
        while True:
            due = self.due()
            if not due:
                later = [
                    r.available_at
                    for r in self.runs.values()
                    if r.status in _PARKED and self.now < r.available_at < INFINITY
                ]
                if not later:
                    return executions
                self.now = min(later)
                continue
            if executions >= limit:
                raise RuntimeError(
                    f"runs still due after {limit} executions: look for a run that never "
                    "settles, or raise the limit"
                )
            executions += 1
            await self.execute(due[0].run_id)
