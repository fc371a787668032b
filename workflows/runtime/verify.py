"""Replay recorded runs against code without executing or writing anything: `verify_runs`.

`VerifyExecution` is the replay engine (`RunExecution`) with a `ReplayWriter` that commits
nothing. Every recorded step, sleep, wait, child and race decision is served from the journal;
where the code reaches a call the journal has no result for (the frontier of an active run) the
call blocks instead of running, and once every call is blocked the replay stops there, as a
suspension would. The first disagreement is reported as a `Divergence` instead of failing the
run: a different call at a top-level position, a different kind under a key, a call past the
end of a completed run, a run that ends before its journal does, a race or join whose branch
set no longer covers its recorded branches, and recorded calls inside an entered branch or loop
iteration that the code no longer makes. No step body runs; no I/O.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from ripple.workflows import serde
from ripple.workflows.authoring.composition import Branch
from ripple.workflows.authoring.context import WorkflowContext
from ripple.workflows.authoring.definition import WorkflowDefinition
from ripple.workflows.authoring.retry import RetryPolicy
from ripple.workflows.errors import NonDeterminismError
from ripple.workflows.journal import SCOPING_KINDS, Entry, StepStatus, current_scope
from ripple.workflows.runs.verification import Divergence, RecordedRun, VerifyReport
from ripple.workflows.runtime.engine import RunExecution
from ripple.workflows.runtime.ports import ChildSpec, WaitSpec

__all__ = ["ReplayWriter", "VerifyExecution", "verify_run", "verify_runs"]

#: Kinds whose unrecorded calls past a completed run's journal are not a divergence: values a
#: replay makes (`ctx.now()`, ...) and patch markers.
_FREE_KINDS = frozenset({"patch", "now", "uuid", "random"})


@dataclass(frozen=True, slots=True)
class _Facts:
    """The `RunFacts` of a replay: no deadline, no recovery, the real clock."""

    run_id: str
    workflow: str
    version: int
    input: Any
    attempt: int
    db_now: datetime
    epoch: int = 0
    deadline: datetime | None = None
    trace: dict[str, str] | None = None
    step_count: int = 0
    recovered: bool = False
    recoveries: int = 0


class ReplayWriter:
    """A `RunWriter` that commits nothing: replay only."""

    async def flush(
        self,
        entries: list[Entry],
        step_count: int,
        trim: Sequence[str] = (),
        *,
        renew: bool = False,
    ) -> None:
        return None

    async def settle_race(
        self, entries: list[Entry], step_count: int, losers: Sequence[str]
    ) -> list[str]:
        return []

    async def check_match(self, event: str, match: dict[str, Any]) -> None:
        """Replay answers waits from the journal: the contract was checked when it was written."""

    async def register_wait(
        self, entries: list[Entry], step_count: int, wait: WaitSpec
    ) -> tuple[bool, Any]:
        return False, None

    async def start_child(self, entries: list[Entry], step_count: int, child: ChildSpec) -> Entry:
        return child.entry

    async def time_out(
        self, entries: list[Entry], step_count: int, entry: Entry, is_wait: bool
    ) -> Entry:
        return entry

    async def suspend(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        wake_at: datetime,
        blocking_keys: list[str],
    ) -> datetime:
        return wake_at

    async def finish(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        output: Any,
        error: dict[str, Any] | None,
    ) -> None:
        return None

    async def retry_run(
        self, entries: list[Entry], step_count: int, delay: float, error: dict[str, Any]
    ) -> None:
        return None


def _describe(entry: Entry) -> str:
    return f"{entry.kind} {entry.key!r}"


class VerifyExecution(RunExecution):
    """One replay of a recorded run against the code; `verify()` returns its divergence."""

    def __init__(
        self,
        run: RecordedRun,
        definition: WorkflowDefinition[Any, Any],
        resolve: Callable[[str], WorkflowDefinition[Any, Any] | None],
    ) -> None:
        facts = _Facts(
            run_id=run.run_id,
            workflow=run.workflow,
            version=run.version,
            input=run.input,
            attempt=max(run.attempt, 1),
            db_now=datetime.now(UTC),
        )
        super().__init__(
            facts,
            definition,
            list(run.journal),
            ReplayWriter(),
            max_steps=2**62,
            is_stopping=lambda: False,
            resolve=resolve,
        )
        self.recorded = run
        # Only a completed run reached its end: a failed or canceled one stopped where its
        # journal stops (a retry resumes there), so a call past it is its frontier.
        self._finished_run = run.status == "completed"
        self._divergence: Divergence | None = None
        self._consumed: set[str] = set()
        self._entered: set[str] = set()
        self._branches: set[str] | None = None

    # -- divergences -------------------------------------------------------------------------

    def _diverge(self, position: int, expected: str, actual: str) -> None:
        if self._divergence is None:
            run = self.recorded
            self._divergence = Divergence(
                run.run_id, run.workflow, run.version, run.status, position, expected, actual
            )

    def _next_seq(self) -> int:
        return max(self.journal.by_seq, default=-1) + 1

    # -- where the replay meets the code -----------------------------------------------------

    def allocate(self, name: str, kind: str) -> tuple[str, int, Entry | None]:
        scope = current_scope.get()
        position = self.journal.top_position
        branches, self._branches = self._branches, None
        try:
            key, seq, entry = super().allocate(name, kind)
        except NonDeterminismError as exc:
            recorded = self.journal.by_key.get(exc.step_key)
            if not scope and position < len(self.journal.top):
                recorded = self.journal.top[position]
            where = recorded.seq if recorded is not None else self._next_seq()
            expected = _describe(recorded) if recorded is not None else exc.recorded_kind
            self._diverge(where, expected, f"{kind} {exc.step_key!r}")
            raise
        if entry is None:
            if self._finished_run and kind not in _FREE_KINDS:
                actual = f"{kind} {key!r}"
                self._diverge(seq, f"end of {self.recorded.status} run", actual)
                raise self.fail_fatal(
                    NonDeterminismError(self.run_id, key, kind, "nothing (the run ended)")
                )
            return key, seq, entry
        self._consumed.add(key)
        if branches is not None and kind in ("race", "join"):
            self._check_branches(entry, kind, branches)
        return key, seq, entry

    def _check_branches(self, entry: Entry, kind: str, branches: set[str]) -> None:
        prefix = entry.key + "/"
        recorded = {
            k[len(prefix) :].split("/", 1)[0] for k in self.journal.by_key if k.startswith(prefix)
        }
        output = entry.output if isinstance(entry.output, dict) else {}
        if entry.status == StepStatus.COMPLETED:
            if kind == "race":
                recorded.add(output.get("winner", ""))
            else:
                recorded |= set(output)
        elif entry.status == StepStatus.FAILED and kind == "race" and "winner" in output:
            recorded.add(output["winner"])
        missing = sorted(recorded - branches)
        if missing:
            self._diverge(
                entry.seq,
                f"{kind} {entry.key!r} with branch(es) {', '.join(map(repr, missing))}",
                f"{kind} {entry.key!r} with branches {', '.join(map(repr, sorted(branches)))}",
            )
            raise self.fail_fatal(
                NonDeterminismError(self.run_id, entry.key, kind, f"{kind} with other branches")
            )

    def _track(self, fn: Callable[[], Awaitable[Any]]) -> Callable[[], Awaitable[Any]]:
        async def tracked() -> Any:
            self._entered.add(current_scope.get())
            return await fn()

        return tracked

    def _track_branches(self, branches: Any) -> Any:
        """`branches`, each noting that the replay entered its scope; anything but a mapping
        as it is, for the composition to refuse as a run would."""
        if not isinstance(branches, Mapping):
            self._branches = None
            return branches
        self._branches = set(branches)
        return {b: self._track(fn) for b, fn in branches.items()}

    async def race(self, name: str, branches: Mapping[str, Branch]) -> Any:
        return await super().race(name, self._track_branches(branches))

    async def join(self, name: str, branches: Mapping[str, Branch]) -> Any:
        return await super().join(name, self._track_branches(branches))

    async def loop(self, ctx: WorkflowContext, name: str, body: Any, state: Any, keep: int) -> Any:
        async def tracked(ctx: WorkflowContext, state: Any) -> Any:
            self._entered.add(current_scope.get())
            return await body(ctx, state)

        return await super().loop(ctx, name, tracked, state, keep)

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
        # The frontier: no step body runs. Block until the replay stops.
        await self._stall.block("frontier", key, None)

    async def _time_out(self, entry: Entry, *, is_wait: bool) -> Entry:
        # A timeout the journal has not recorded yet: the frontier as well.
        await self._stall.block("frontier", entry.key, None)
        return entry

    # -- the replay --------------------------------------------------------------------------

    async def verify(self) -> Divergence | None:
        """Replay the run; its first divergence, or None."""
        try:
            value = (
                serde.load(self.facts.input, self.definition.input_type)
                if self.definition.takes_input
                else None
            )
        except ValidationError as exc:
            return Divergence(
                self.run_id,
                self.recorded.workflow,
                self.recorded.version,
                self.recorded.status,
                0,
                "the recorded input",
                f"an input type it does not match ({exc.error_count()} error(s))",
            )
        ctx = WorkflowContext(self, self.run_id, self.definition.name, self.facts.version, value)
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        ended: str | None = None
        try:
            await self._call_workflow(ctx, value)
            ended = "the workflow returning"
        except asyncio.CancelledError:
            if self._stop_reason is None:
                raise
            task.uncancel()
        except NonDeterminismError:
            pass
        except Exception as exc:
            ended = f"the workflow raising {type(exc).__name__}"
        if self._divergence is None and isinstance(self._fatal, NonDeterminismError):
            fatal = self._fatal
            self._diverge(
                self._next_seq(), fatal.recorded_kind, f"{fatal.expected_kind} {fatal.step_key!r}"
            )
        if self._divergence is None and ended is not None:
            journal = self.journal
            if journal.top_position < len(journal.top):
                left = journal.top[journal.top_position]
                self._diverge(left.seq, _describe(left), ended)
            elif (
                self.recorded.status == "completed"
                and ended != "the workflow returning"
                and not self._stop_reason
            ):
                self._diverge(self._next_seq(), "end of completed run", ended)
        if self._divergence is None:
            self._check_unconsumed()
        return self._divergence

    def _check_unconsumed(self) -> None:
        """Recorded calls inside a branch or loop iteration this replay entered that the code
        no longer makes."""
        if not self._entered:
            return
        scoping = [e.key + "/" for e in self.journal.by_key.values() if e.kind in SCOPING_KINDS]
        for entry in sorted(self.journal.by_key.values(), key=lambda e: e.seq):
            if entry.key in self._consumed or entry.kind in _FREE_KINDS:
                continue
            scope = max((s for s in self._entered if entry.key.startswith(s)), key=len, default="")
            if not scope:
                continue
            inner = any(
                len(s) > len(scope) and entry.key.startswith(s) and s not in self._entered
                for s in scoping
            )
            if not inner:
                self._diverge(entry.seq, _describe(entry), "no such call")
                return


async def verify_run(
    run: RecordedRun,
    definitions: Mapping[str, WorkflowDefinition[Any, Any]],
) -> Divergence | None:
    """Replay one recorded run against `definitions[run.workflow]` in a task of its own."""
    definition = definitions[run.workflow]
    engine = VerifyExecution(run, definition, definitions.get)
    return await asyncio.get_running_loop().create_task(engine.verify())


async def verify_runs(
    runs: Iterable[RecordedRun],
    definitions: Iterable[WorkflowDefinition[Any, Any]],
    *,
    progress: Callable[[int], None] | None = None,
) -> VerifyReport:
    """Replay every run against the definition of its workflow; the report."""
    by_name = {d.name: d for d in definitions}
    divergences: list[Divergence] = []
    checked = 0
    for run in runs:
        if run.workflow not in by_name:
            continue
        divergence = await verify_run(run, by_name)
        checked += 1
        if divergence is not None:
            divergences.append(divergence)
        if progress is not None:
            progress(checked)
    return VerifyReport(runs_checked=checked, divergences=divergences)
