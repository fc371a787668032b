"""Ripple workflows: durable async workflows journaled in Postgres.

Each name below is imported from its module when it is first named: importing one part of the
package (the run store, say, in a process that only reads runs, such as a `ripple` operator
command) does not load the authoring API or the engine.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ripple.workflows.authoring.composition import Break, Continue
    from ripple.workflows.authoring.context import Steps, WorkflowContext
    from ripple.workflows.authoring.definition import WorkflowDefinition, workflow
    from ripple.workflows.authoring.flow import Concurrency, Debounce, Fairness, Throttle
    from ripple.workflows.authoring.retry import RetryPolicy
    from ripple.workflows.authoring.schedule import Schedule
    from ripple.workflows.errors import (
        JoinError,
        NonDeterminismError,
        NonRetriableError,
        RetryAfterError,
        RollbackError,
        StepFailedError,
        StepTimeoutError,
        WorkflowCanceled,
        WorkflowError,
        WorkflowFailed,
    )
    from ripple.workflows.runs.handle import RunHandle
    from ripple.workflows.runs.records import (
        Page,
        Run,
        RunStatus,
        SignalResult,
        StepRecord,
        StepStatus,
    )
    from ripple.workflows.runtime.worker import Worker

#: The module each public name comes from.
_SOURCES = {
    "Break": "authoring.composition",
    "Continue": "authoring.composition",
    "Steps": "authoring.context",
    "WorkflowContext": "authoring.context",
    "WorkflowDefinition": "authoring.definition",
    "workflow": "authoring.definition",
    "Concurrency": "authoring.flow",
    "Debounce": "authoring.flow",
    "Fairness": "authoring.flow",
    "Throttle": "authoring.flow",
    "RetryPolicy": "authoring.retry",
    "Schedule": "authoring.schedule",
    "JoinError": "errors",
    "NonDeterminismError": "errors",
    "NonRetriableError": "errors",
    "RetryAfterError": "errors",
    "RollbackError": "errors",
    "StepFailedError": "errors",
    "StepTimeoutError": "errors",
    "WorkflowCanceled": "errors",
    "WorkflowError": "errors",
    "WorkflowFailed": "errors",
    "RunHandle": "runs.handle",
    "Page": "runs.records",
    "Run": "runs.records",
    "RunStatus": "runs.records",
    "SignalResult": "runs.records",
    "StepRecord": "runs.records",
    "StepStatus": "runs.records",
    "Worker": "runtime.worker",
}

__all__ = [
    "Break",
    "Concurrency",
    "Continue",
    "Debounce",
    "Fairness",
    "JoinError",
    "NonDeterminismError",
    "NonRetriableError",
    "Page",
    "RetryAfterError",
    "RetryPolicy",
    "RollbackError",
    "Run",
    "RunHandle",
    "RunStatus",
    "Schedule",
    "SignalResult",
    "StepFailedError",
    "StepRecord",
    "StepStatus",
    "StepTimeoutError",
    "Steps",
    "Throttle",
    "Worker",
    "WorkflowCanceled",
    "WorkflowContext",
    "WorkflowDefinition",
    "WorkflowError",
    "WorkflowFailed",
    "workflow",
]


def __getattr__(name: str) -> Any:
    source = _SOURCES.get(name)
    if source is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{source}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
