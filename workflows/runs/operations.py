"""Operating runs after the fact: retry in place, fork from a step, bulk cancel and retry, and
waiting for a run's end with a time limit (REST long-polls). Each single-run action is one
transaction; bulk actions walk the matching runs in run id order, one transaction per batch,
so they are safe while workers run (see `store.select_run_batch`). Hints follow each commit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ripple.platform.access import audit_store
from ripple.platform.core.db import Connection, map_errors, transaction
from ripple.platform.core.ids import new_id
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import RunReady, run_channel
from ripple.platform.errors import Conflict, InvalidInput, NotFound
from ripple.platform.ops import metrics
from ripple.workflows import serde, store
from ripple.workflows.authoring.definition import check_workflow_name
from ripple.workflows.authoring.retry import seconds
from ripple.workflows.runs.client import WorkflowClient
from ripple.workflows.runs.handle import RunHandle
from ripple.workflows.runs.records import ACTIVE, TERMINAL, Run, RunStatus
from ripple.workflows.runs.settle import notify_canceled, settle_canceled

__all__ = ["BULK_BATCH", "RunFilter", "RunOperations", "WaitOutcome"]

log = get_logger("ripple.operations")

#: Runs one bulk transaction acts on.
BULK_BATCH: Final = 500
_RETRYABLE = (RunStatus.FAILED.value, RunStatus.CANCELED.value)
_ACTIVE = tuple(s.value for s in ACTIVE)


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which runs a bulk action acts on (the `list_runs` filters).

    `until` and `created_before` both bound the creation time (the earlier wins); runs
    created after the action started are never touched.
    """

    workflow: str | None = None
    status: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    created_before: datetime | None = None


@dataclass(frozen=True, slots=True)
class WaitOutcome:
    """A run after waiting for its end: `timed_out` when it was still active at the limit."""

    run: Run
    timed_out: bool


def _aware(value: datetime | None, field: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidInput(f"{field} must be a datetime", field=field)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _filter_details(flt: RunFilter) -> dict[str, Any]:
    """A bulk action's filter as its audit row records it (unset fields left out)."""
    values = {
        "workflow": flt.workflow,
        "status": flt.status,
        "since": flt.since,
        "until": flt.until,
        "created_before": flt.created_before,
    }
    return {
        key: value.isoformat() if isinstance(value, datetime) else value
        for key, value in values.items()
        if value is not None
    }


class RunOperations:
    """Retry, fork, bulk actions and bounded waits over a `WorkflowClient`'s pool and waker."""

    def __init__(self, client: WorkflowClient) -> None:
        self._client = client

    # -- one run ----------------------------------------------------------------------------

    async def retry(self, run_id: str) -> RunHandle[Any]:
        """Resume a failed or canceled run in place; raises NotFound or Conflict."""
        async with transaction(self._client.pool) as conn:
            row = await store.lock_run_for_operation(conn, run_id=run_id)
            if row is None:
                raise NotFound(f"no run {run_id}: check the run id")
            status = row.status
            if status not in _RETRYABLE:
                what = "still active" if status in _ACTIVE else "completed"
                raise Conflict(
                    f"run {run_id} is {status} ({what}); only failed or canceled runs can be "
                    "retried" + ("; fork it to run it again" if status == "completed" else "")
                )
            retried = await store.retry_runs(conn, run_ids=[run_id])
            await audit_store.record(conn, "run.retry", run_id)
        self._retried(retried)
        log.info("run_retried", run_id=run_id)
        return self._client.handle(run_id)

    async def fork(self, run_id: str, from_step: str, input: Any = None) -> RunHandle[Any]:
        """A new run of the same workflow whose journal is the source's up to (not including)
        `from_step`; it runs on the newest version a worker serves. `input=None` keeps the
        source's input."""
        if not isinstance(from_step, str) or not from_step:
            raise InvalidInput("from_step must be a step key of the run", field="fromStep")
        new_run = new_id()
        async with transaction(self._client.pool) as conn:
            row = await store.lock_run_for_operation(conn, run_id=run_id)
            if row is None:
                raise NotFound(f"no run {run_id}: check the run id")
            seq = await store.find_step_seq(conn, run_id=run_id, key=from_step)
            if seq is None or seq < 0:
                keys = await store.select_step_keys(conn, run_id=run_id)
                raise InvalidInput(
                    f"step {from_step!r} is not in the journal of run {run_id}; its steps are: "
                    + (", ".join(keys) if keys else "(none)"),
                    field="fromStep",
                )
            if input is None:
                value = row.input
            else:
                definition = self._client.resolve(row.workflow)
                value = self._client.prepare_input(definition, row.workflow, input)
            workflow = await store.insert_fork(
                conn, run_id=new_run, source_run_id=run_id, input=value
            )
            await store.copy_journal(conn, run_id=new_run, source_run_id=run_id, before_seq=seq)
            await audit_store.record(
                conn, "run.fork", run_id, {"from_step": from_step, "new_run_id": new_run}
            )
        metrics.RUNS_STARTED.labels(workflow).inc()
        self._client.waker.notify(RunReady(workflow=workflow))
        log.info("run_forked", run_id=new_run, forked_from=run_id, from_step=from_step)
        definition = self._client.resolve(workflow)
        output_type = definition.output_type if definition is not None else serde.NO_TYPE
        return RunHandle(self._client, new_run, output_type)

    def _retried(self, runs: Sequence[store.RunRef]) -> None:
        """After the retry's commit: each retried run counts as started once."""
        for run in runs:
            metrics.RUNS_STARTED.labels(run.workflow).inc()
        self._client.waker.notify(RunReady())

    # -- bulk -------------------------------------------------------------------------------

    def _statuses(self, status: str | None, allowed: tuple[str, ...], action: str) -> list[str]:
        if status is None:
            return list(allowed)
        if status not in allowed:
            raise InvalidInput(
                f"{action} acts on runs that are {', '.join(allowed)}; status {status!r} "
                "matches none of them",
                field="status",
            )
        return [status]

    def _bounds(self, flt: RunFilter) -> tuple[datetime | None, datetime]:
        if flt.workflow is not None:
            check_workflow_name(flt.workflow)
        since = _aware(flt.since, "since")
        bounds = [
            b
            for b in (_aware(flt.until, "until"), _aware(flt.created_before, "created_before"))
            if b is not None
        ]
        return since, min([*bounds, datetime.now(UTC)])

    async def _count(self, flt: RunFilter, statuses: list[str]) -> int:
        since, before = self._bounds(flt)
        with map_errors():
            return await store.count_run_filter(
                self._client.pool,
                workflow=flt.workflow,
                statuses=statuses,
                since=since,
                before=before,
            )

    async def _batches(self, flt: RunFilter, statuses: list[str], act: Any, action: str) -> int:
        """Apply `act` to the matching runs, one transaction per batch. The first batch's
        transaction writes the action's audit row and each later one adds its runs to the
        row's count, so the row always counts exactly the runs whose change committed."""
        since, before = self._bounds(flt)
        cursor = ""
        total = 0
        audit_id: str | None = None
        while True:
            async with transaction(self._client.pool) as conn:
                ids = await store.select_run_batch(
                    conn,
                    workflow=flt.workflow,
                    statuses=statuses,
                    since=since,
                    before=before,
                    cursor=cursor,
                    limit=BULK_BATCH,
                )
                if audit_id is None:
                    details = {"filter": _filter_details(flt), "count": len(ids)}
                    audit_id = await audit_store.record(conn, action, None, details)
                elif ids:
                    await audit_store.add_to_count(conn, audit_id, len(ids))
                if not ids:
                    break
                after = await act(conn, ids)
            total += len(ids)
            cursor = ids[-1]
            after()
        return total

    async def cancel_many(self, flt: RunFilter, *, dry_run: bool = False) -> int:
        """Cancel every active run matching `flt` (and their active children); the count of
        matching runs canceled (`dry_run`: how many match now, nothing changed)."""
        statuses = self._statuses(flt.status, _ACTIVE, "cancel_many")
        if dry_run:
            return await self._count(flt, statuses)

        async def act(conn: Connection, ids: list[str]) -> Any:
            rows = await store.cancel_trees(conn, run_ids=ids)
            await settle_canceled(conn, rows)
            return lambda: notify_canceled(self._client.waker, rows)

        count = await self._batches(flt, statuses, act, "runs.cancel_many")
        log.info("runs_canceled_in_bulk", count=count, workflow=flt.workflow)
        return count

    async def retry_many(self, flt: RunFilter, *, dry_run: bool = False) -> int:
        """Retry every failed or canceled run matching `flt`; the count retried (`dry_run`:
        how many match now, nothing changed)."""
        statuses = self._statuses(flt.status, _RETRYABLE, "retry_many")
        if dry_run:
            return await self._count(flt, statuses)

        async def act(conn: Connection, ids: list[str]) -> Any:
            retried = await store.retry_runs(conn, run_ids=ids)
            return lambda: self._retried(retried)

        count = await self._batches(flt, statuses, act, "runs.retry_many")
        log.info("runs_retried_in_bulk", count=count, workflow=flt.workflow)
        return count

    # -- waiting ----------------------------------------------------------------------------

    async def wait(self, run_id: str, timeout: timedelta | float) -> WaitOutcome:
        """The run once it is terminal, or as it is when `timeout` passes (woken by the run's
        hint, re-checked at least every poll interval). Raises NotFound."""
        limit = seconds(timeout)
        end = time.monotonic() + limit
        async with self._client.waker.listen(run_channel(run_id)) as listener:
            while True:
                run = await self._client.get_run(run_id)
                if run is None:
                    raise NotFound(f"no run {run_id}: check the run id")
                if run.status in TERMINAL:
                    return WaitOutcome(run, False)
                remaining = end - time.monotonic()
                if remaining <= 0:
                    return WaitOutcome(run, True)
                await listener.wait(remaining)
