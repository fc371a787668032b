"""Ripple workflows: durable async workflows journaled in Postgres."""

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
from ripple.workflows.runs.records import Page, Run, RunStatus, SignalResult, StepRecord, StepStatus
from ripple.workflows.runtime.worker import Worker

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
