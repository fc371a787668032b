"""The replay engine: executes one claimed run until it completes, fails or suspends.

The workflow function runs from the top on every resume; each step looks its key up in the
journal (loaded once per resume) and returns the recorded result, or executes and records it.

The durability invariant: a step body, a child start, a wait registration, a timer and a
suspension begin only after every step result this run completed earlier is committed. Steps
started together (`asyncio.gather`) may commit together, and the last step commits with the
run's completion. Writes go through a `RunWriter`, fenced by the claim's epoch; the worker's
writer commits the flushes of all its runs together (group commit), so the invariant costs a
share of a transaction per step, not one each. A run recovered after its worker was lost
while it ran alone (the claim counts those, see `store.claim_runs`) spends a crash budget
(`max_recoveries`), never a step's attempts. No SQL here.

`RunExecution` composes the engine's parts: the journal bookkeeping (`ledger.py`), steps
and retries (`steps.py`), timers, waits and children (`waits.py`) and composition
(`authoring/composition.py`); it owns the run itself and its outcome: run the workflow
function, then commit its completion, failure, retry or suspension. The ports it writes
through are in `ports.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import ValidationError

from ripple.platform.core.logs import get_logger
from ripple.workflows import serde
from ripple.workflows.authoring import composition
from ripple.workflows.authoring.context import WorkflowContext
from ripple.workflows.errors import (
    NonRetriableError,
    RollbackError,
    StepFailedError,
)
from ripple.workflows.journal import StepStatus
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runtime.ports import Outcome
from ripple.workflows.runtime.stall import Block
from ripple.workflows.runtime.steps import StepExecution
from ripple.workflows.runtime.waits import WaitExecution

__all__ = ["INFINITY", "RunExecution"]

log = get_logger("ripple.workflows")

INFINITY = datetime.max.replace(tzinfo=UTC)


class RunExecution(StepExecution, WaitExecution):
    """One resume of one run: replay, execute, record, then complete, fail or suspend."""

    # -- composition (`authoring/composition.py`) --------------------------------------------

    async def race(self, name: str, branches: Mapping[str, Callable[[], Awaitable[Any]]]) -> Any:
        return await composition.race(self, name, branches)

    async def join(self, name: str, branches: Mapping[str, Callable[[], Awaitable[Any]]]) -> Any:
        return await composition.join(self, name, branches)

    async def loop(self, ctx: WorkflowContext, name: str, body: Any, state: Any, keep: int) -> Any:
        return await composition.loop(self, ctx, name, body, state, keep)

    def removed(self, name: str) -> None:
        composition.removed(self, name)

    def patched(self, change_id: str) -> bool:
        return composition.patched(self, change_id)

    # -- the run -----------------------------------------------------------------------------

    async def _call_workflow(self, ctx: WorkflowContext, value: Any) -> Any:
        fn = self.definition.fn
        try:
            result = await (fn(ctx, value) if self.definition.takes_input else fn(ctx))
        except Exception as exc:
            if self._fatal is None and self._compensations and not self._will_retry(exc):
                await self._compensate()
            raise
        if self._fatal is not None:
            raise self._fatal
        return result

    def _will_retry(self, exc: BaseException) -> bool:
        policy = self.definition.retry
        return (
            self._fatal is None
            and not isinstance(exc, RollbackError | NonRetriableError)
            and policy.is_retryable(exc)
            and policy.allows(self.attempt + 1)
        )

    async def execute(self) -> Outcome:
        """Run until completion, failure or suspension; commit the outcome."""
        deadline = self.facts.deadline
        if deadline is not None and self.facts.db_now >= deadline:
            return await self._fail(self._deadline_error().error)
        if self.facts.recovered and self.facts.recoveries > self.max_recoveries:
            return await self._fail(self._worker_lost_error())
        try:
            value = (
                serde.load(self.facts.input, self.definition.input_type)
                if self.definition.takes_input
                else None
            )
        except ValidationError as exc:
            error = {
                "type": "InvalidInput",
                "message": f"input does not match {self.definition.name}'s input type: {exc}",
            }
            return await self._fail(error)
        ctx = WorkflowContext(self, self.run_id, self.definition.name, self.facts.version, value)
        # The workflow runs in this task; a stall (every active step blocked) or the deadline
        # cancels it with `_stop_reason` set, which tells those apart from an outside cancel
        # (run canceled, lease lost, worker shutdown), which propagates.
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        timer = None
        if deadline is not None:
            limit = max(0.0, (deadline - self.clock()).total_seconds())
            timer = asyncio.get_running_loop().call_later(limit, self._stop, "deadline")
        result: Any = None
        failure: BaseException | None = None
        try:
            result = await self._call_workflow(ctx, value)
        except asyncio.CancelledError:
            if self._stop_reason is None:
                raise
            task.uncancel()
        except Exception as exc:
            failure = exc
        finally:
            if timer is not None:
                timer.cancel()
        self.concluding = True
        if self._stop_reason == "suspend":
            return await self._park(self._stalled)
        if self._stop_reason == "deadline":
            return await self._fail(self._deadline_error().error)
        return await self._conclude(result, failure)

    def _worker_lost_error(self) -> dict[str, Any]:
        running = [e.key for e in self.journal.by_key.values() if e.status == StepStatus.RUNNING]
        where = f"; step(s) {', '.join(map(repr, running))} were running" if running else ""
        return {
            "type": "WorkerLost",
            "message": f"run {self.run_id} lost its worker {self.facts.recoveries} times while "
            f"it ran alone (killed, out of memory, or stalled past its lease){where}; crash "
            f"budget of {self.max_recoveries} recoveries (RIPPLE_MAX_RECOVERIES) exhausted",
        }

    async def _conclude(self, result: Any, exc: BaseException | None) -> Outcome:
        if exc is None:
            try:
                output = serde.dump(result, self.definition.output_type)
            except Exception as dump_exc:
                return await self._fail(serde.error_json(dump_exc))
            await self.writer.finish(
                self._take(), self.step_count, RunStatus.COMPLETED, output, None
            )
            return Outcome(RunStatus.COMPLETED)
        if self._fatal is not None:
            return await self._fail(self._fatal.error)
        error = exc.error if isinstance(exc, StepFailedError) else serde.error_json(exc)
        if self._will_retry(exc):
            delay = self.definition.retry.delay(self.attempt)
            await self.writer.retry_run(self._take(), self.step_count, delay, error)
            log.info("run_retry_scheduled", attempt=self.attempt, delay=delay)
            return Outcome(RunStatus.PENDING, self.clock() + timedelta(seconds=delay))
        return await self._fail(error)

    async def _fail(self, error: dict[str, Any]) -> Outcome:
        await self.writer.finish(self._take(), self.step_count, RunStatus.FAILED, None, error)
        return Outcome(RunStatus.FAILED)

    async def _park(self, blocks: list[Block]) -> Outcome:
        kinds = {b.kind for b in blocks}
        wakes = [b.wake_at for b in blocks if b.wake_at is not None]
        wake_at = min(wakes) if wakes else INFINITY
        if "release" in kinds:
            wake_at = self.clock()
        if self.facts.deadline is not None:
            wake_at = min(wake_at, self.facts.deadline)
        if kinds & {"wait", "child"}:
            status = RunStatus.WAITING
        elif kinds <= {"release"}:
            status = RunStatus.PENDING
        else:
            status = RunStatus.SLEEPING
        keys = [b.key for b in blocks if b.kind in ("wait", "child")]
        wake_at = await self.writer.suspend(self._take(), self.step_count, status, wake_at, keys)
        return Outcome(status, wake_at)
