"""`WorkflowContext` and `Steps`: the API workflow code calls (`ctx.step.run`, `ctx.now()`...).

Every call delegates to the run's engine, which replays the journal or executes and records.
No I/O of its own.
"""

from __future__ import annotations

import asyncio
import random as _random
import uuid as _uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ripple.workflows.authoring.approvals import Approval
from ripple.workflows.authoring.retry import RetryPolicy

if TYPE_CHECKING:
    from ripple.workflows.authoring.definition import WorkflowDefinition

__all__ = ["Steps", "WorkflowContext"]

T = TypeVar("T")


class RunExecution(Protocol):
    """The engine side of a context (implemented by
    `ripple.workflows.runtime.engine.RunExecution`)."""

    attempt: int

    def clock(self) -> datetime: ...

    def deterministic(self, kind: str, make: Callable[[], Any]) -> Any: ...

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
    ) -> Any: ...

    async def sleep(
        self, name: str, *, duration: timedelta | float | None = None, until: datetime | None = None
    ) -> None: ...

    async def wait_for_event(
        self,
        name: str,
        *,
        event: str | None,
        match: dict[str, Any] | None,
        timeout: timedelta | float | None,
    ) -> dict[str, Any] | None: ...

    async def run_child(
        self,
        workflow: WorkflowDefinition[Any, Any] | str,
        input: Any,
        *,
        name: str | None,
        timeout: timedelta | float | None,
    ) -> Any: ...

    async def race(
        self, name: str, branches: Mapping[str, Callable[[], Awaitable[Any]]]
    ) -> Any: ...

    async def join(
        self, name: str, branches: Mapping[str, Callable[[], Awaitable[Any]]]
    ) -> Any: ...

    async def loop(
        self, ctx: WorkflowContext, name: str, body: Any, state: Any, keep: int
    ) -> Any: ...

    def removed(self, name: str) -> None: ...

    def set_attributes(self, values: dict[str, Any]) -> None: ...

    async def wait_for_approval(
        self,
        name: str,
        *,
        approvers: list[str] | None,
        timeout: timedelta | float | None,
        details: dict[str, Any] | None,
        on_timeout: str,
    ) -> Approval: ...

    def approval_url(self, name: str) -> str: ...

    def patched(self, change_id: str) -> bool: ...


class Steps:
    """Durable steps of a run; each call is journaled under its name (auto-indexed on repeats)."""

    __slots__ = ("_ctx", "_engine")

    def __init__(self, engine: RunExecution, ctx: WorkflowContext) -> None:
        self._engine = engine
        self._ctx = ctx

    async def run(
        self,
        name: str,
        fn: Callable[..., Any],
        *args: Any,
        retry: RetryPolicy | None = None,
        compensate: Callable[..., Any] | None = None,
        timeout: timedelta | float | None = None,
        **kwargs: Any,
    ) -> Any:
        """Run `fn(*args, **kwargs)` (sync or async) once and record its result.

        On replay the recorded result is returned without calling `fn`. Failures are retried
        per `retry` (default: 3 attempts, 1 s doubling to 60 s, 20 % jitter) with durable
        waits. `compensate` is called (with the result, if it takes an argument) when the run
        later fails terminally or raises `RollbackError`, in reverse order of the steps.
        """
        return await self._engine.run_step(
            name, fn, args, kwargs, retry=retry, compensate=compensate, timeout=timeout
        )

    async def sleep(self, name: str, duration: timedelta | float) -> None:
        """Sleep durably for `duration`; the worker slot is released while the run sleeps."""
        await self._engine.sleep(name, duration=duration)

    async def sleep_until(self, name: str, when: datetime) -> None:
        """Sleep durably until `when` (naive datetimes are UTC)."""
        await self._engine.sleep(name, until=when)

    async def wait_for_event(
        self,
        name: str,
        *,
        event: str | None = None,
        match: dict[str, Any] | None = None,
        timeout: timedelta | float | None = None,
    ) -> dict[str, Any] | None:
        """Wait for a signal named `name` (or an event on topic `event`) whose payload
        contains `match`; returns the payload, or None after `timeout`."""
        return await self._engine.wait_for_event(name, event=event, match=match, timeout=timeout)

    async def run_workflow(
        self,
        workflow: WorkflowDefinition[Any, T] | str,
        input: Any = None,
        *,
        name: str | None = None,
        timeout: timedelta | float | None = None,
    ) -> Any:
        """Start a child run and wait for it; returns its output, raises WorkflowFailed if it
        failed (StepTimeoutError after `timeout`; the child keeps running)."""
        return await self._engine.run_child(workflow, input, name=name, timeout=timeout)

    async def race(
        self, name: str, branches: Mapping[str, Callable[[], Awaitable[Any]]]
    ) -> tuple[str, Any]:
        """Run the branches concurrently; the first to finish wins, and `(winner, value)` is
        returned. The other branches are canceled: their timers and waits are dropped, their
        running step bodies canceled and their child runs canceled. The winner and its value
        (as JSON: a model comes back as a dict) are journaled, so a replay returns the same
        winner. A branch is a zero-argument callable returning an awaitable that uses
        `ctx.step.*` (a step, sleep, wait, child run, or several in sequence); its steps are
        keyed `name/branch/step`. If the first branch to finish raised, the race raises it.
        """
        result: tuple[str, Any] = await self._engine.race(name, branches)
        return result

    async def join(
        self, name: str, branches: Mapping[str, Callable[[], Awaitable[Any]]]
    ) -> dict[str, Any]:
        """Run every branch concurrently and return `{branch: value}` (values as JSON). If any
        branch fails, the others still finish, then `JoinError` lists the failures."""
        results: dict[str, Any] = await self._engine.join(name, branches)
        return results

    async def loop(
        self,
        name: str,
        body: Callable[[WorkflowContext, Any], Awaitable[Any]],
        state: Any = None,
        *,
        keep: int = 10,
    ) -> Any:
        """A durable loop: `await body(ctx, state)` returns `Continue(new_state)` for another
        iteration or `Break(value)` to end it (then `loop` returns `value`). Each iteration's
        steps are keyed `name/~i/step` and its state is journaled; journal entries of iterations
        older than the last `keep` are deleted as later ones are recorded, so a loop of a
        million iterations keeps a bounded journal and a resume replays from the last recorded
        state, not from iteration 0. Finished iterations do not count toward
        `RIPPLE_MAX_STEPS_PER_RUN`."""
        return await self._engine.loop(self._ctx, name, body, state, keep)

    async def wait_for_approval(
        self,
        name: str,
        *,
        approvers: list[str] | None = None,
        timeout: timedelta | float | None = timedelta(days=2),
        details: dict[str, Any] | None = None,
        on_timeout: str = "reject",
    ) -> Approval:
        """Wait for a person to approve or reject this step through its link
        (`approval_url(name)`, `client.approvals.list()`, the dashboard).

        `details` are shown on the approval page; `approvers`, when given, lists the names
        `by` must be one of. After `timeout` the approval is rejected with `by=None`, or
        `StepTimeoutError` is raised with `on_timeout="raise"`.
        """
        return await self._engine.wait_for_approval(
            name, approvers=approvers, timeout=timeout, details=details, on_timeout=on_timeout
        )

    def approval_url(self, name: str) -> str:
        """The signed link of approval `name` of this run (`/approve/{token}`, after
        RIPPLE_PUBLIC_URL when set). Valid once its `wait_for_approval` began, until it is
        decided or expires; call it before the wait to send the link from a step."""
        return self._engine.approval_url(name)

    def removed(self, name: str) -> Awaitable[None]:
        """Declare a step `name` that earlier code called here and this code no longer does:
        runs that recorded it skip it on replay instead of failing with NonDeterminismError;
        new runs are not affected. Awaiting the result is optional."""
        self._engine.removed(name)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def _done() -> Awaitable[None]:
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    done.set_result(None)
    return done


class WorkflowContext:
    """What a workflow function receives as `ctx`."""

    __slots__ = ("_engine", "input", "run_id", "step", "version", "workflow_name")

    def __init__(
        self, engine: RunExecution, run_id: str, workflow_name: str, version: int, input: Any
    ) -> None:
        self._engine = engine
        self.run_id = run_id
        self.workflow_name = workflow_name
        self.version = version
        self.input = input
        self.step = Steps(engine, self)

    @property
    def attempt(self) -> int:
        """The workflow-level attempt (1-based)."""
        return self._engine.attempt

    def patched(self, change_id: str) -> bool:
        """Branch on a code change without a new version: True for runs that reach this point
        on the new code (new runs, and runs that had not got here yet), False for runs whose
        journal already went past it on the old code. Keep the old branch until those drain.

            if ctx.patched("send-sms"):
                await ctx.step.run("sms", send_sms, user)
        """
        return self._engine.patched(change_id)

    def set_attributes(self, **values: str | int | float | bool | datetime) -> Awaitable[None]:
        """Set search attributes of this run (`ctx.set_attributes(customer="acme", amount=120.5)`),
        journaled like a step: a replay does not write them again. Types: str, int, float, bool,
        datetime; a later value of a name replaces the earlier one. Find runs by them with
        `client.list_runs(where='customer = "acme" and amount > 100')`. Awaiting is optional.
        """
        self._engine.set_attributes(dict(values))
        return _done()

    def now(self) -> datetime:
        """The current time (database clock), recorded once and replayed identically."""
        value = self._engine.deterministic("now", lambda: self._engine.clock().isoformat())
        return datetime.fromisoformat(value)

    def uuid(self) -> _uuid.UUID:
        """A random UUID, recorded once and replayed identically."""
        return _uuid.UUID(self._engine.deterministic("uuid", lambda: str(_uuid.uuid4())))

    def random(self) -> float:
        """A random float in [0, 1), recorded once and replayed identically."""
        value: float = self._engine.deterministic("random", _random.random)
        return value
