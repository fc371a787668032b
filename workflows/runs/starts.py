"""`Starts`: creating runs — one start (with its debounce and idempotency key, group-committed
with the other starts of this process), and a publish's fan-out (`create_runs`) in the
publisher's transaction. Wake hints go out after commit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from pydantic import ValidationError

from ripple.platform.core.commit_watch import CommitWatch
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool, dumps, map_errors
from ripple.platform.core.deadlines import Deadline, bounded
from ripple.platform.core.group_commit import GroupCommit
from ripple.platform.core.ids import check_idempotency_key, new_id, new_ids
from ripple.platform.core.wake import NullWaker, RunReady, hint_around_caller_commit
from ripple.platform.errors import Conflict, InvalidInput
from ripple.platform.ops import metrics, tracing
from ripple.workflows import serde, store
from ripple.workflows.authoring.definition import WorkflowDefinition, check_workflow_name
from ripple.workflows.authoring.flow import Debounce, check_fairness_key, check_priority
from ripple.workflows.authoring.retry import seconds
from ripple.workflows.runs.handle import RunHandle
from ripple.workflows.runs.registry import Registry

__all__ = ["RunRequest", "Starts"]

OutT = TypeVar("OutT")
_UNSET: Any = object()


@dataclass(frozen=True, slots=True)
class RunRequest:
    """A run to create inside a publisher's transaction (topic fan-out)."""

    workflow: str
    input: Any
    idempotency_key: str
    trace: dict[str, str] | None = None
    #: `input` already encoded as JSON text by a caller that validated it (a publish encodes
    #: each payload once): written as is, not encoded again.
    input_json: str | None = None


@dataclass(frozen=True, slots=True)
class _NewRun:
    """The columns of a top-level run a start creates."""

    run_id: str
    workflow: str
    version: int | None
    input: Any
    idempotency_key: str | None
    deadline: datetime | None
    retention_seconds: float | None
    trace: dict[str, str] | None
    priority: int
    fairness_key: str | None = None

    def columns(self) -> dict[str, Any]:
        """The keyword arguments of `store.insert_run` / `store.debounce_run`."""
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "version": self.version,
            "input": self.input,
            "idempotency_key": self.idempotency_key,
            "deadline": self.deadline,
            "retention_seconds": self.retention_seconds,
            "trace": self.trace,
            "priority": self.priority,
            "fairness_key": self.fairness_key,
        }

    def start_row(self) -> dict[str, Any]:
        """The run as one element of `store.start_runs`' JSON array."""
        row = self.columns()
        row["deadline"] = None if self.deadline is None else self.deadline.isoformat()
        return row


def _deadline_at(deadline: datetime | timedelta | float | None) -> datetime | None:
    if deadline is None:
        return None
    if isinstance(deadline, datetime):
        return deadline.replace(tzinfo=UTC) if deadline.tzinfo is None else deadline
    return datetime.now(UTC) + timedelta(seconds=seconds(deadline))


def _key_path(debounce: Debounce) -> list[str] | None:
    return None if debounce.key is None else debounce.key.split(".")


class Starts:
    """Create runs of the definitions in `registry` (and of workflows it does not know)."""

    def __init__(
        self, pool: Pool, waker: NullWaker, settings: Settings, registry: Registry
    ) -> None:
        self.pool = pool
        self.waker = waker
        self.settings = settings
        self._registry = registry
        # The registry's own dict, read on every start without a hop through it.
        self._definitions = registry.definitions
        #: Counts what starts in a caller's transaction create once that transaction commits.
        self.commit_watch = CommitWatch(pool)
        #: Concurrent starts of this process, written together (see `start`).
        self._starts: GroupCommit[dict[str, Any], str | None] = GroupCommit(
            self._write_starts, name="ripple-start-commit"
        )

    def prepare_input(
        self, definition: WorkflowDefinition[Any, Any] | None, name: str, input: Any
    ) -> Any:
        """`input` as stored for a run of `name`: validated when the definition is known."""
        depth = self.settings.max_json_depth
        if definition is None:
            try:
                return serde.dump(input, field="input", max_depth=depth)
            except InvalidInput:
                raise
            except Exception as exc:
                raise InvalidInput(f"input of {name} is not JSON: {exc}", field="input") from exc
        if not definition.takes_input:
            if input is not None:
                raise InvalidInput(f"workflow {name} takes no input", field="input")
            return None
        try:
            return serde.validate(input, definition.input_type, field="input", max_depth=depth)
        except ValidationError as exc:
            raise InvalidInput(
                f"invalid input for workflow {name}: {exc.errors(include_url=False)}",
                field="input",
            ) from exc

    async def start(
        self,
        workflow: WorkflowDefinition[Any, OutT] | str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        deadline: datetime | timedelta | float | None = None,
        version: int | None = None,
        priority: int = 0,
        conn: Connection | None = None,
        fairness_key: str | None = None,
    ) -> RunHandle[OutT]:
        """Start a run (idempotent per (workflow, idempotency_key)); returns its handle.

        `priority` (0-1000): among pending runs of the workflow, higher is claimed first.
        `fairness_key`: the run's key under the workflow's `Fairness` (instead of the one
        read from the input); ignored when the workflow declares none.
        """
        if isinstance(workflow, WorkflowDefinition):
            definition: WorkflowDefinition[Any, Any] | None = workflow
            self._registry.register(workflow)
            name = workflow.name
        else:
            name = check_workflow_name(workflow)
            definition = self._definitions.get(name)
        check_idempotency_key(idempotency_key)
        if version is not None and (not isinstance(version, int) or version < 1):
            raise InvalidInput("version must be an integer >= 1", field="version")
        check_priority(priority)
        check_fairness_key(fairness_key)
        value = self.prepare_input(definition, name, input)
        # Work on the pool answers within RIPPLE_DB_TIMEOUT; a caller's transaction is its own.
        answer_by = Deadline(self.settings.db_timeout)
        own = None if conn is not None else answer_by
        if self._registry.needs_sync:
            await bounded(self._registry.sync_definitions(), answer_by)
        if version is None and definition is not None:
            version = definition.version
        deadline_at = _deadline_at(deadline)
        if deadline_at is None and definition is not None and definition.deadline is not None:
            deadline_at = datetime.now(UTC) + definition.deadline
        retention_s = self._retention_seconds(definition)
        run = _NewRun(
            run_id=new_id(),
            workflow=name,
            version=version,
            input=value,
            idempotency_key=idempotency_key,
            deadline=deadline_at,
            retention_seconds=retention_s,
            trace=tracing.current_context(),
            priority=priority,
            fairness_key=fairness_key,
        )
        run_id = run.run_id
        debounce = definition.debounce if definition is not None else None
        with map_errors():
            # One statement: without a caller's transaction it commits on its own, together
            # with the other starts of this process in flight at that moment (group commit).
            target = conn if conn is not None else self.pool
            if debounce is not None:
                created, run_id = await bounded(self._debounce(target, debounce, run), own)
            elif conn is None:
                created = await self._starts.submit(run.start_row(), timeout=answer_by.left())
            else:
                created = run_id if await store.insert_run(conn, **run.columns()) else None
            if created is None and debounce is None:
                run_id = await bounded(self._existing(target, name, idempotency_key), own)
        if created is not None:
            hint = RunReady(workflow=name)
            if conn is None:
                # the run's insert committed (the group commit's, or its own statement)
                metrics.RUNS_STARTED.labels(name).inc()
                self.waker.notify(hint)
                # Let the wake layer's publisher send the hint before the caller goes on (it
                # usually awaits result() next, whose first read would delay the hint).
                await asyncio.sleep(0)
            else:  # the caller commits later: hint now and again shortly; count on commit
                hint_around_caller_commit(lambda: self.waker.notify(hint))
                await self.commit_watch.after_caller_commit(
                    conn, lambda: metrics.RUNS_STARTED.labels(name).inc()
                )
        output_type = definition.output_type if definition is not None else serde.NO_TYPE
        return RunHandle(self, run_id, output_type)

    @property
    def start_batches(self) -> int:
        """Transactions this client's group-committed starts have used so far."""
        return self._starts.batches

    async def _write_starts(self, batch: list[dict[str, Any]]) -> list[str | None]:
        """One statement for many starts: each one's run id if it created the run, else None
        (its idempotency key names an existing run)."""
        with map_errors():
            created = await store.start_runs(self.pool, starts=batch)
        return [start["run_id"] if start["run_id"] in created else None for start in batch]

    async def _existing(
        self, target: Connection | Pool, workflow: str, idempotency_key: str | None
    ) -> str:
        """The run a start's idempotency key created before (its insert created none)."""
        assert idempotency_key is not None  # only a key makes an insert create nothing
        run_id = await store.find_run_by_key(
            target, workflow=workflow, idempotency_key=idempotency_key
        )
        if run_id is None:
            raise Conflict(
                f"the run of {workflow} with idempotency key {idempotency_key!r} was deleted "
                "(retention) while this start ran; start it again"
            )
        return run_id

    async def _debounce(
        self, target: Connection | Pool, debounce: Debounce, run: _NewRun
    ) -> tuple[str | None, str]:
        """Collapse this start into the key's pending debounced run, or create one. Returns
        (the id if created, else None; the run's id)."""
        if run.idempotency_key is not None:
            existing = await store.find_run_by_key(
                target, workflow=run.workflow, idempotency_key=run.idempotency_key
            )
            if existing is not None:
                return None, existing
        debounced = await store.debounce_run(
            target,
            **run.columns(),
            period=debounce.period_seconds,
            max_wait=debounce.max_wait_seconds,
            key_path=_key_path(debounce),
        )
        return (debounced.run_id if debounced.created else None), debounced.run_id

    async def create_runs(self, conn: Connection, requests: Sequence[RunRequest]) -> int:
        """Insert pending runs inside the caller's transaction; idempotent per
        (workflow, idempotency_key). Returns how many were created. Call
        `notify_runs_ready()` after the commit."""
        if not requests:
            return 0
        if self._registry.needs_sync:
            await self._registry.sync_definitions()
        #: run ids, workflows, inputs (JSON text), idempotency keys, traces (JSON text),
        #: retention seconds: the parallel arrays `store.insert_runs` takes
        columns: tuple[list[Any], ...] = ([], [], [], [], [], [])
        debounced: list[dict[str, Any]] = []
        retentions: dict[str, Any] = {}
        checked: set[str] = set()
        for req in requests:
            if req.workflow not in checked:
                check_workflow_name(req.workflow)
                checked.add(req.workflow)
            known = self._definitions.get(req.workflow)
            if known is not None and known.debounce is not None:
                debounced.append(
                    {
                        "run_id": new_id(),
                        "workflow": req.workflow,
                        "input": self.prepare_input(None, req.workflow, req.input),
                        "idempotency_key": req.idempotency_key,
                        "trace": req.trace,
                        "retention_seconds": self._retention_seconds(known),
                        "period": known.debounce.period_seconds,
                        "path": _key_path(known.debounce),
                    }
                )
                continue
            # Not validated against the input type here: one subscriber's bad type must not
            # fail the publish. The run fails at execution with a clear InvalidInput error.
            retention = retentions.get(req.workflow, _UNSET)
            if retention is _UNSET:
                # known here when this process registered the workflow; else the default
                retention = retentions[req.workflow] = self._retention_seconds(known)
            columns[1].append(req.workflow)
            if req.input_json is not None:
                text: str | None = None if req.input_json == "null" else req.input_json
            else:
                value = self.prepare_input(None, req.workflow, req.input)
                text = None if value is None else dumps(value)
            columns[2].append(text)
            columns[3].append(req.idempotency_key)
            columns[4].append(None if req.trace is None else dumps(req.trace))
            columns[5].append(retention)
        columns[0].extend(new_ids(len(columns[1])))  # the run ids, made in one go
        created = 0
        with map_errors():
            if columns[0]:
                created = await store.insert_runs(
                    conn,
                    run_ids=columns[0],
                    workflows=columns[1],
                    inputs=columns[2],
                    idempotency_keys=columns[3],
                    traces=columns[4],
                    retention_seconds=columns[5],
                )
            # every start counts as delivered, also the ones collapsed into a pending run
            # (a publish's events are new: a repeat, skipped, returns no row)
            if debounced and await store.debounce_runs(conn, runs=debounced):
                created += len(debounced)
        return created

    def _retention_seconds(self, definition: WorkflowDefinition[Any, Any] | None) -> float | None:
        """The retention snapshot of a new run: the workflow's, capped by the server maximum."""
        if definition is None or definition.retention is None:
            return None  # the sweeper applies settings.default_run_retention_days
        cap = self.settings.max_run_retention_days * 86400
        return min(definition.retention.total_seconds(), cap)

    def notify_runs_ready(self) -> None:
        """Tell workers that runs are available (after the creating transaction committed)."""
        self.waker.notify(RunReady())

    def handle(self, run_id: str) -> RunHandle[Any]:
        """A handle to an existing run."""
        return RunHandle(self, run_id)
