"""Ripple workflows: durable async workflows journaled in Postgres."""

from ripple.platform.cadence import Schedule
from ripple.workflows.client import RunHandle, RunRequest, WorkflowClient
from ripple.workflows.composition import Break, Continue
from ripple.workflows.context import Steps, WorkflowContext
from ripple.workflows.definition import WorkflowDefinition, workflow
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
from ripple.workflows.flow import Concurrency, Debounce, Throttle
from ripple.workflows.records import Page, Run, RunStatus, SignalResult, StepRecord, StepStatus
from ripple.workflows.retry import RetryPolicy
from ripple.workflows.worker import Worker

__all__ = [
    "Break",
    "Concurrency",
    "Continue",
    "Debounce",
    "JoinError",
    "NonDeterminismError",
    "NonRetriableError",
    "Page",
    "RetryAfterError",
    "RetryPolicy",
    "RollbackError",
    "Run",
    "RunHandle",
    "RunRequest",
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
    "WorkflowClient",
    "WorkflowContext",
    "WorkflowDefinition",
    "WorkflowError",
    "WorkflowFailed",
    "workflow",
]
