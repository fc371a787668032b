"""`replay`: exported journals (`ripple runs export`) against workflow code, in a unit test,
without a database; raises `ReplayDiverged` with the divergence report."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from ripple.workflows.authoring.definition import WorkflowDefinition
from ripple.workflows.runs.verification import VerifyReport, load_runs
from ripple.workflows.runtime.verify import verify_runs

__all__ = ["ReplayDiverged", "replay"]

Definitions = WorkflowDefinition[Any, Any] | ModuleType | Iterable[WorkflowDefinition[Any, Any]]


class ReplayDiverged(AssertionError):
    """Recorded runs no longer replay on the code; `.report` holds every divergence."""

    def __init__(self, report: VerifyReport) -> None:
        super().__init__(f"recorded runs diverge from the code:\n{report}")
        self.report = report


def _definitions(source: Definitions) -> list[WorkflowDefinition[Any, Any]]:
    if isinstance(source, WorkflowDefinition):
        return [source]
    if isinstance(source, ModuleType):
        found = {id(v): v for v in vars(source).values() if isinstance(v, WorkflowDefinition)}
        return list(found.values())
    return list(source)


def replay(
    workflow_or_module: Definitions, path: str | Path, *, strict: bool = True
) -> VerifyReport:
    """Replay the runs exported to `path` whose workflow `workflow_or_module` defines; no step
    body runs. Raises `ReplayDiverged` when a run diverges (with `strict=False`, only when an
    active run does). Returns the report. Call it from sync code or `await replay_async`."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(replay_async(workflow_or_module, path, strict=strict))
    raise RuntimeError("replay() runs its own event loop: in async code use `await replay_async`")


async def replay_async(
    workflow_or_module: Definitions, path: str | Path, *, strict: bool = True
) -> VerifyReport:
    """`replay` for async tests."""
    definitions = _definitions(workflow_or_module)
    runs = load_runs(await asyncio.to_thread(Path(path).read_text))
    report = await verify_runs(runs, definitions)
    if report.divergences and (strict or not report.ok):
        raise ReplayDiverged(report)
    return report
