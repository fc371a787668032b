"""The public names of `ripple.workflows` (API.md) are pinned."""

from __future__ import annotations

import ripple.workflows as workflows

API_NAMES = {
    "workflow",
    "WorkflowContext",
    "Worker",
    "RetryPolicy",
    "NonRetriableError",
    "RetryAfterError",
    "RollbackError",
    "WorkflowFailed",
    "WorkflowCanceled",
    "NonDeterminismError",
    "Concurrency",
    "Throttle",
    "Debounce",
    "Fairness",
    "Schedule",
}


def test_exports__api_names_are_exported() -> None:
    assert set(workflows.__all__) >= API_NAMES
    for name in workflows.__all__:
        assert getattr(workflows, name) is not None


def test_exports__all_is_pinned() -> None:
    assert sorted(workflows.__all__) == sorted(
        API_NAMES
        | {
            "Break",
            "Continue",
            "JoinError",
            "Page",
            "Run",
            "RunHandle",
            "RunStatus",
            "SignalResult",
            "StepFailedError",
            "StepRecord",
            "StepStatus",
            "StepTimeoutError",
            "Steps",
            "WorkflowDefinition",
            "WorkflowError",
        }
    )
