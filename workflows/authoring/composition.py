"""Composition inside a workflow: `race`, `join`, durable `loop`, and code changes under
in-flight runs (`removed`, `patched`). No SQL here: the engine's writer journals.

Branches and loop iterations scope the keys of the steps called inside them (`race/branch/step`,
`loop/~i/step`, through the `current_scope` context variable), so the same step name in two
branches never collides. A race's winner, a join's results and a loop's state are journaled,
so a replay never depends on timing.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ripple.platform.errors import InvalidInput
from ripple.workflows import serde
from ripple.workflows.errors import (
    JoinError,
    JournalUnavailable,
    NonDeterminismError,
    WorkflowFailed,
)
from ripple.workflows.journal import Entry, Journal, StepStatus, current_scope

if TYPE_CHECKING:
    from ripple.workflows.authoring.context import WorkflowContext

__all__ = ["Break", "Continue", "join", "loop", "patched", "race", "removed"]

Branch = Callable[[], Awaitable[Any]]


class RunExecution(Protocol):
    """What composition needs of the run's engine
    (`ripple.workflows.runtime.engine.RunExecution`)."""

    journal: Journal
    step_count: int

    def clock(self) -> datetime: ...
    def allocate(self, name: str, kind: str) -> tuple[str, int, Entry | None]: ...
    def record(self, entry: Entry) -> None: ...
    def trim(self, prefix: str) -> None: ...
    def raise_if_fatal(self) -> None: ...
    def fail_fatal(self, exc: WorkflowFailed) -> WorkflowFailed: ...
    def recorded_failure(self, key: str, error: dict[str, Any]) -> Exception: ...
    async def settle_race(self, losers: list[str]) -> None: ...


@dataclass(frozen=True, slots=True)
class Continue:
    """Returned by a loop body: run another iteration with `state` (journaled)."""

    state: Any = None


@dataclass(frozen=True, slots=True)
class Break:
    """Returned by a loop body: end the loop; `ctx.step.loop` returns `value`."""

    value: Any = None


def _check_name(kind: str, name: object) -> str:
    if not isinstance(name, str) or not name or name.startswith("$") or "/" in name:
        raise InvalidInput(f"invalid {kind} name {name!r}: use a non-empty name without '/' or '$'")
    if "\x00" in name:
        # Names become journal keys, Postgres text, which cannot hold U+0000.
        raise InvalidInput(
            f"invalid {kind} name {name!r}: it contains the NUL character (U+0000), which "
            "Postgres cannot store; remove it"
        )
    return name


def _check_branches(kind: str, branches: Mapping[str, Branch]) -> dict[str, Branch]:
    if not isinstance(branches, Mapping) or not branches:
        raise InvalidInput(f"{kind} takes a non-empty dict of branch name -> callable")
    for name, fn in branches.items():
        _check_name(f"{kind} branch", name)
        if not callable(fn):
            raise InvalidInput(
                f"{kind} branch {name!r} must be a zero-argument callable returning an awaitable"
                " (e.g. lambda: ctx.step.sleep(...)), not {type(fn).__name__}"
            )
    return dict(branches)


def _spawn(scope: str, fn: Branch) -> asyncio.Task[Any]:
    """Run a branch in its own task, with its steps keyed under `scope`."""
    context = contextvars.copy_context()
    context.run(current_scope.set, scope)

    async def branch() -> Any:
        return await fn()

    return asyncio.get_running_loop().create_task(branch(), context=context)


async def _stop_all(tasks: list[asyncio.Task[Any]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def _raise_outage(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Re-raise a branch's `JournalUnavailable`: an outage is no branch's failure to journal."""
    for task in tasks:
        if isinstance(error := task.exception(), JournalUnavailable):
            raise error


async def race(engine: RunExecution, name: str, branches: Mapping[str, Branch]) -> tuple[str, Any]:
    """The first branch to finish wins; the others are canceled (see `Steps.race`)."""
    fns = _check_branches("race", branches)
    key, seq, entry = engine.allocate(_check_name("race", name), "race")
    if entry is not None and entry.status == StepStatus.COMPLETED:
        return entry.output["winner"], entry.output["value"]
    if entry is not None and entry.status == StepStatus.FAILED:
        raise engine.recorded_failure(key, entry.error or {})
    started = engine.clock()
    if entry is None:
        engine.record(Entry.begun(key, seq, "race", started))
    tasks = {branch: _spawn(f"{key}/{branch}/", fn) for branch, fn in fns.items()}
    try:
        done, _ = await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:  # the run suspends, is canceled or lost its lease: so do the branches
        await _stop_all(list(tasks.values()))
        raise
    # Several may finish in one loop iteration: the first declared of those wins.
    winner = next(branch for branch, task in tasks.items() if task in done)
    losers = [branch for branch in tasks if branch != winner]
    await _stop_all([tasks[branch] for branch in losers])
    engine.raise_if_fatal()
    error = tasks[winner].exception()
    if isinstance(error, JournalUnavailable):
        raise error  # an outage decides nothing: the race runs again on the next claim
    begun = Entry.begun(key, seq, "race", started)
    if error is None:
        value = serde.dump(tasks[winner].result())
        final = begun.completed({"winner": winner, "value": value}, engine.clock())
    else:
        final = begun.failed(serde.error_json(error), engine.clock(), output={"winner": winner})
    engine.record(final)
    await engine.settle_race([f"{key}/{branch}/" for branch in losers])
    if error is not None:
        raise error
    return winner, value


async def join(engine: RunExecution, name: str, branches: Mapping[str, Branch]) -> dict[str, Any]:
    """Run every branch; if any fails, the others finish first, then `JoinError`."""
    fns = _check_branches("join", branches)
    key, seq, entry = engine.allocate(_check_name("join", name), "join")
    if entry is not None and entry.status == StepStatus.COMPLETED:
        recorded: dict[str, Any] = entry.output
        return recorded
    if entry is not None and entry.status == StepStatus.FAILED:
        raise JoinError(name, (entry.error or {}).get("failures", {}))
    started = engine.clock()
    if entry is None:
        engine.record(Entry.begun(key, seq, "join", started))
    tasks = {branch: _spawn(f"{key}/{branch}/", fn) for branch, fn in fns.items()}
    try:
        await asyncio.wait(tasks.values())
    except BaseException:
        await _stop_all(list(tasks.values()))
        raise
    engine.raise_if_fatal()
    _raise_outage(tasks.values())
    failures = {
        branch: serde.error_json(exc)
        for branch, task in tasks.items()
        if (exc := task.exception()) is not None
    }
    if failures:
        error = JoinError(name, failures)
        engine.record(
            Entry.begun(key, seq, "join", started).failed(
                {**serde.error_json(error), "failures": failures}, engine.clock()
            )
        )
        raise error
    results = {branch: serde.dump(task.result()) for branch, task in tasks.items()}
    engine.record(Entry.begun(key, seq, "join", started).completed(results, engine.clock()))
    return results


async def loop(
    engine: RunExecution,
    ctx: WorkflowContext,
    name: str,
    body: Callable[[WorkflowContext, Any], Awaitable[Continue | Break]],
    state: Any,
    keep: int,
) -> Any:
    """A durable loop with bounded history (see `Steps.loop`)."""
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 1:
        raise InvalidInput(f"loop keep must be an integer >= 1, not {keep!r}")
    if not callable(body):
        raise InvalidInput("loop body must be an async function (ctx, state) -> Continue | Break")
    key, seq, entry = engine.allocate(_check_name("loop", name), "loop")
    if entry is not None and entry.status == StepStatus.COMPLETED:
        return entry.output["value"]
    if entry is not None and entry.status == StepStatus.FAILED:
        raise engine.recorded_failure(key, entry.error or {})
    started = engine.clock()
    if entry is None:
        i, current = 0, serde.dump(state)
        # Journaled before the first iteration, as race and join are: it scopes that
        # iteration's steps, so a run that suspends or crashes in it replays them in the loop.
        engine.record(Entry.begun(key, seq, "loop", started, output={"i": i, "state": current}))
    else:  # resume from the last recorded iteration, not from iteration 0
        i, current = entry.output["i"], entry.output["state"]
        started = entry.started_at or started
    while True:
        token = current_scope.set(f"{key}/~{i}/")
        executions = engine.step_count
        try:
            outcome = await body(ctx, current)
        finally:
            current_scope.reset(token)
        if isinstance(outcome, Break):
            value = serde.dump(outcome.value)
            done = {"i": i, "value": value}
            engine.record(Entry.begun(key, seq, "loop", started).completed(done, engine.clock()))
            return value
        if not isinstance(outcome, Continue):
            raise InvalidInput(
                f"loop {name!r} body returned {type(outcome).__name__}: return Continue(state) "
                "or Break(value)"
            )
        current = serde.dump(outcome.state)
        i += 1
        # A finished iteration's executions do not count toward RIPPLE_MAX_STEPS_PER_RUN: the
        # journal is bounded by `keep`, not by the loop's length.
        engine.step_count = executions
        state_entry = {"i": i, "state": current}
        engine.record(Entry.begun(key, seq, "loop", started, output=state_entry))
        if i - keep - 1 >= 0:
            engine.trim(f"{key}/~{i - keep - 1}/")


def removed(engine: RunExecution, name: str) -> None:
    """Declare a step that new code no longer calls here (see `Steps.removed`)."""
    if current_scope.get():
        return  # inside branches and iterations only keys are checked: nothing to skip
    engine.raise_if_fatal()
    engine.journal.skip(_check_name("step", name))


def patched(engine: RunExecution, change_id: str) -> bool:
    """True where this run reached the change on new code (see `WorkflowContext.patched`)."""
    _check_name("patch", change_id)
    engine.raise_if_fatal()
    marker = "$patch:" + change_id
    journal = engine.journal
    scope = current_scope.get()
    if not scope and journal.passed() and journal.top[journal.top_position].key != marker:
        return False  # the journal went past this point on the old code
    try:
        key, seq, entry = journal.allocate(marker, "patch", scope)
    except NonDeterminismError as exc:
        raise engine.fail_fatal(exc) from None
    if entry is None:
        now = engine.clock()
        engine.record(Entry.recorded(key, seq, "patch", True, now))
    return True
