"""`WorkflowContext` and `Steps`: the API workflow code calls (`ctx.step.run`, `ctx.now()`...).

Every call delegates to the run's engine, which replays the journal or executes and records.
No I/O of its own.
"""

from __future__ import annotations

import random as _random
import uuid as _uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ripple.workflows.retry import RetryPolicy

if TYPE_CHECKING:
    from ripple.workflows.definition import WorkflowDefinition

__all__ = ["Steps", "WorkflowContext"]

T = TypeVar("T")


class RunExecution(Protocol):
    """The engine side of a context (implemented by `ripple.workflows.engine.RunExecution`)."""

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


class Steps:
    """Durable steps of a run; each call is journaled under its name (auto-indexed on repeats)."""

    __slots__ = ("_engine",)

    def __init__(self, engine: RunExecution) -> None:
        self._engine = engine

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
        self.step = Steps(engine)

    @property
    def attempt(self) -> int:
        """The workflow-level attempt (1-based)."""
        return self._engine.attempt

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
