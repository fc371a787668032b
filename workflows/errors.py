"""Workflow errors: what user code raises in steps, what callers of runs see, and the internal
control-flow signals of the engine (which subclass BaseException so user code cannot swallow
them with `except Exception`). No I/O.

RippleError
└── WorkflowError
    ├── WorkflowFailed(run_id, error)       a run (or child run) ended failed
    │   └── NonDeterminismError             code and journal disagree
    ├── WorkflowCanceled(run_id)            a run was canceled
    ├── JoinError(name, failures)           branches of `ctx.step.join` failed
    └── StepTimeoutError                    a child or step exceeded its `timeout`
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ripple.platform.errors import RippleError
from ripple.workflows.authoring.retry import seconds

__all__ = [
    "JoinError",
    "JournalUnavailable",
    "LeaseLost",
    "NonDeterminismError",
    "NonRetriableError",
    "RetryAfterError",
    "RollbackError",
    "StepFailedError",
    "StepTimeoutError",
    "WorkflowCanceled",
    "WorkflowError",
    "WorkflowFailed",
]


class NonRetriableError(Exception):
    """Raised in a step: fail it now, with no further attempts."""

    def __init__(self, message: str = "non-retriable error") -> None:
        super().__init__(message)

    @property
    def message(self) -> str:
        return str(self.args[0])


class RetryAfterError(Exception):
    """Raised in a step: retry it after `delay` (timedelta or seconds) instead of the backoff."""

    def __init__(self, message: str = "retry later", delay: timedelta | float = 1.0) -> None:
        super().__init__(message)
        self._delay = seconds(delay)

    @property
    def message(self) -> str:
        return str(self.args[0])

    @property
    def delay(self) -> float:
        """Seconds until the next attempt."""
        return self._delay


class RollbackError(Exception):
    """Raised in a step or the workflow: fail the run and run the registered compensations."""

    def __init__(self, message: str = "rollback requested") -> None:
        super().__init__(message)

    @property
    def message(self) -> str:
        return str(self.args[0])


class StepFailedError(Exception):
    """A step failed terminally in an earlier execution; replays raise this in its place."""

    def __init__(self, step_key: str, error: dict[str, Any]) -> None:
        super().__init__(f"step {step_key!r} failed: {error.get('type')}: {error.get('message')}")
        self.step_key = step_key
        self.error = error


class WorkflowError(RippleError):
    """A workflow run did not produce a result."""


class WorkflowFailed(WorkflowError):
    """The run failed; `error` is its stored error JSON ({type, message, traceback})."""

    def __init__(self, run_id: str, error: dict[str, Any] | None = None) -> None:
        err = error or {}
        super().__init__(
            f"run {run_id} failed: {err.get('type', 'Error')}: {err.get('message', '')}"
        )
        self.run_id = run_id
        self.error: dict[str, Any] = err


class WorkflowCanceled(WorkflowError):
    """The run was canceled."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} was canceled")
        self.run_id = run_id


class NonDeterminismError(WorkflowFailed):
    """The workflow code no longer matches the run's journal."""

    def __init__(self, run_id: str, step_key: str, expected_kind: str, recorded_kind: str) -> None:
        message = (
            f"non-determinism in run {run_id} at step {step_key!r}: the code now calls "
            f"{expected_kind!r} but the journal recorded {recorded_kind!r}; deploy code that "
            "keeps the step order and kinds of in-flight runs (branch on ctx.version)"
        )
        super().__init__(run_id, {"type": "NonDeterminismError", "message": message})
        self.args = (message,)
        self.step_key = step_key
        self.expected_kind = expected_kind
        self.recorded_kind = recorded_kind


class StepTimeoutError(WorkflowError, TimeoutError):
    """A step or child workflow did not finish within its `timeout`."""


class LeaseLost(BaseException):
    """Internal: this worker no longer owns the run (lease expired, canceled, or fenced)."""


class JournalUnavailable(BaseException):
    """Internal: a journal write of the run met a database outage (its cause: `Unavailable`).

    Raised into the workflow function by the step, wait, child or race that awaited the write.
    Not the workflow's failure: the run is neither failed nor compensated; the worker abandons
    the execution and the run is claimed again from its committed journal. (A step body's own
    `Unavailable` stays the step's error.)
    """


class JoinError(WorkflowError):
    """Branches of `ctx.step.join` failed (the others finished first)."""

    def __init__(self, name: str, failures: dict[str, dict[str, Any]]) -> None:
        listed = "; ".join(
            f"{branch}: {error.get('type', 'Error')}: {error.get('message', '')}"
            for branch, error in failures.items()
        )
        super().__init__(f"join {name!r}: {len(failures)} branch(es) failed ({listed})")
        self.name = name
        #: branch name -> the error it raised, as journaled ({type, message, ...})
        self.failures = failures
