"""`StepExecution`: executing a step (`ctx.step.run`): replay its recorded result or failure,
else run its body attempt by attempt under its `RetryPolicy`, journaling each attempt's start,
retry schedule and result; and the compensations of completed steps, run in reverse order when
the workflow fails for good. No SQL.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import structlog
from pydantic import ValidationError

from ripple.platform.core.logs import get_logger
from ripple.platform.ops import metrics, tracing
from ripple.workflows import serde
from ripple.workflows.authoring.retry import RetryPolicy
from ripple.workflows.errors import (
    LeaseLost,
    NonRetriableError,
    RetryAfterError,
    RollbackError,
    StepFailedError,
    WorkflowError,
)
from ripple.workflows.journal import Entry, StepStatus
from ripple.workflows.runtime.bodies import call_body, observe_step
from ripple.workflows.runtime.ledger import RunLedger

__all__ = ["DEFAULT_STEP_RETRY", "StepExecution"]

log = get_logger("ripple.workflows")

DEFAULT_STEP_RETRY = RetryPolicy()


def _takes_argument(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params
    )


class StepExecution(RunLedger):
    """Steps and their retries, on the run's ledger."""

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
        kind: str = "run",
    ) -> Any:
        key, seq, entry = self.allocate(name, kind)
        self._enter()
        try:
            if entry is not None and entry.status == StepStatus.COMPLETED:
                try:
                    value = serde.load(entry.output, serde.return_annotation(fn))
                except ValidationError:
                    value = entry.output
                self._register_compensation(seq, key, compensate, value)
                return value
            if entry is not None and entry.status == StepStatus.FAILED:
                raise self.recorded_failure(key, entry.error or {})
            value = await self._execute(key, seq, kind, entry, fn, args, kwargs, retry, timeout)
            self._register_compensation(seq, key, compensate, value)
            return value
        finally:
            self._exit()

    async def _execute(
        self,
        key: str,
        seq: int,
        kind: str,
        entry: Entry | None,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        retry: RetryPolicy | None,
        timeout: timedelta | float | None,
    ) -> Any:
        policy = retry or DEFAULT_STEP_RETRY
        attempts = entry.attempts if entry is not None else 0
        if entry is not None and entry.status == StepStatus.RUNNING:
            attempts -= 1  # that attempt's worker was lost: a crash is not the step's error
        last_error = entry.error if entry is not None else None
        started_at = self.clock()
        if entry is not None and entry.status == StepStatus.RETRYING and entry.due_at is not None:
            await self._block("retry", key, entry.due_at)
        while True:
            attempt = attempts + 1
            if not policy.allows(attempt):
                error = last_error or {
                    "type": "WorkerLost",
                    "message": f"step {key!r} started {attempts} time(s) without recording a "
                    "result (its worker died or lost its lease); attempt budget exhausted",
                }
                lost = Entry.attempt(key, seq, kind, attempts, started_at)
                self.record(lost.failed(error, self.clock(), attempts=attempts))
                raise StepFailedError(key, error)
            await self._gate()
            self._count_execution()
            started_at = self.clock()
            running = Entry.attempt(key, seq, kind, attempt, started_at)
            self.record(running)
            if self.careful:
                await self.flush()
            else:
                await self._commit_earlier()
            t0 = asyncio.get_running_loop().time()
            tokens = structlog.contextvars.bind_contextvars(step=key)
            try:
                if tracing.recording():
                    with tracing.span("workflow.step", parent=self.facts.trace, step=key):
                        result = await call_body(fn, args, kwargs, timeout)
                else:
                    result = await call_body(fn, args, kwargs, timeout)
                output = serde.dump(result, serde.return_annotation(fn))
            except (asyncio.CancelledError, LeaseLost):
                raise
            except Exception as exc:
                observe_step(self.facts.workflow, key, asyncio.get_running_loop().time() - t0)
                error = serde.error_json(exc)
                retryable = (
                    not isinstance(exc, NonRetriableError | RollbackError | WorkflowError)
                    and policy.is_retryable(exc)
                    and policy.allows(attempt + 1)
                )
                if not retryable:
                    self.record(running.failed(error, self.clock(), attempts=attempt))
                    raise
                delay = exc.delay if isinstance(exc, RetryAfterError) else policy.delay(attempt)
                due = self.clock() + timedelta(seconds=delay)
                self.record(running.retrying(attempt, error, due))
                metrics.STEP_RETRIES.labels(self.facts.workflow).inc()
                log.info("step_retry_scheduled", step=key, attempt=attempt, delay=delay)
                await self._block("retry", key, due)
                attempts, last_error = attempt, error
                continue
            finally:
                structlog.contextvars.reset_contextvars(**tokens)
            observe_step(self.facts.workflow, key, asyncio.get_running_loop().time() - t0)
            self.record(running.completed(output, self.clock(), attempts=attempt))
            return result

    def _register_compensation(
        self, seq: int, key: str, compensate: Callable[..., Any] | None, value: Any
    ) -> None:
        if compensate is not None:
            self._compensations.append((seq, key, compensate, value))

    async def _compensate(self) -> None:
        for _seq, key, fn, value in sorted(self._compensations, key=lambda c: c[0], reverse=True):
            args = (value,) if _takes_argument(fn) else ()
            await self.run_step(
                f"compensate:{key}",
                fn,
                args,
                {},
                retry=None,
                compensate=None,
                timeout=None,
                kind="compensate",
            )
