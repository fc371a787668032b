"""What deploying new code needs from the database: the recorded runs `verify` replays and
`ripple runs export` writes (read-only transactions, so a replica works), the versions still
in use with the live workers serving them, and the operator's early wake of a run's timers
(`wake`, audited in its transaction).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ripple.platform.access import audit_store
from ripple.platform.core.db import Connection, Pool, map_errors, transaction
from ripple.platform.core.wake import NullWaker, RunReady
from ripple.platform.errors import InvalidInput, NotFound
from ripple.workflows import store
from ripple.workflows.authoring.definition import WorkflowDefinition
from ripple.workflows.runs.verification import RecordedRun
from ripple.workflows.store import recorded

__all__ = ["Deploys", "VersionUse", "WorkflowVersions"]

#: Run ids per journal query.
_CHUNK = 1000


@dataclass(frozen=True, slots=True)
class VersionUse:
    """One version of a workflow: its active runs (by status, the oldest's creation) and the
    live workers serving it."""

    version: int | None
    runs: int
    by_status: dict[str, int]
    oldest: datetime | None
    workers: int
    worker_names: list[str]

    @property
    def stranded(self) -> bool:
        """Active runs and no live worker to resume them."""
        return self.runs > 0 and self.workers == 0


@dataclass(frozen=True, slots=True)
class WorkflowVersions:
    workflow: str
    versions: list[VersionUse] = field(default_factory=list)

    @property
    def stranded(self) -> bool:
        return any(v.stranded for v in self.versions)

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "stranded": self.stranded,
            "versions": [
                {
                    "version": v.version,
                    "activeRuns": v.runs,
                    "byStatus": v.by_status,
                    "oldest": None if v.oldest is None else v.oldest.isoformat(),
                    "workers": v.workers,
                    "workerNames": v.worker_names,
                    "stranded": v.stranded,
                }
                for v in self.versions
            ],
        }


def _seconds(value: timedelta | float) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise InvalidInput(f"since must be a positive duration, not {value!r}")
    return seconds


class Deploys:
    """Recorded runs, versions in use, and early wakes."""

    def __init__(self, pool: Pool, read_pool: Pool, waker: NullWaker) -> None:
        self.pool = pool
        self.read_pool = read_pool
        self.waker = waker

    async def _read(self, rows_of: Any) -> list[RecordedRun]:
        with map_errors():
            async with self.read_pool.acquire() as conn, conn.transaction(readonly=True):
                rows: list[recorded.RecordedRow] = await rows_of(conn)
                return await _with_journals(conn, rows)

    async def recorded_runs(
        self,
        definitions: Iterable[WorkflowDefinition[Any, Any]],
        *,
        since: timedelta | float,
        limit: int,
    ) -> list[RecordedRun]:
        """Per definition: its version's active runs, then its completed and failed runs that
        ended within `since`, at most `limit` each. One read-only transaction."""
        if limit < 1:
            raise InvalidInput(f"limit must be at least 1, not {limit}")
        window = _seconds(since)

        async def rows_of(conn: Connection) -> list[recorded.RecordedRow]:
            rows: list[recorded.RecordedRow] = []
            for d in definitions:
                rows += await recorded.select_recorded_runs(
                    conn, workflow=d.name, version=d.version, since_seconds=window, limit=limit
                )
            return rows

        return await self._read(rows_of)

    async def export(
        self,
        run_ids: Sequence[str] = (),
        *,
        workflow: str | None = None,
        since: timedelta | float = timedelta(days=1),
        limit: int = 1000,
    ) -> list[RecordedRun]:
        """The runs `run_ids` (NotFound names a missing one), or those of `workflow` created
        within `since`, with their journals."""
        if not run_ids and workflow is None:
            raise InvalidInput("name run ids, or a workflow with --workflow")
        window = _seconds(since)

        async def rows_of(conn: Connection) -> list[recorded.RecordedRow]:
            if run_ids:
                rows = await recorded.select_runs_by_id(conn, run_ids=list(run_ids))
                missing = set(run_ids) - {r.run_id for r in rows}
                if missing:
                    raise NotFound(
                        f"no run {', '.join(sorted(missing))} with a journal: check the run id "
                        "(a run never claimed has nothing to export)"
                    )
                order = {run_id: i for i, run_id in enumerate(run_ids)}
                return sorted(rows, key=lambda r: order[r.run_id])
            assert workflow is not None
            return await recorded.select_runs_of_workflow(
                conn, workflow=workflow, since_seconds=window, limit=limit
            )

        return await self._read(rows_of)

    async def versions(self, *, live_seconds: float) -> list[WorkflowVersions]:
        """Per workflow with active runs or live workers: each version's active runs and the
        live workers serving it."""
        async with self.read_pool.acquire() as conn:
            runs = await recorded.select_version_runs(conn)
            serving = await recorded.select_workers_serving(conn, live_seconds=live_seconds)
        table: dict[str, dict[int | None, dict[str, Any]]] = {}
        for row in runs:
            use = table.setdefault(row.workflow, {}).setdefault(
                row.version, {"by_status": {}, "oldest": None, "workers": 0, "names": []}
            )
            use["by_status"][row.status] = row.runs
            if use["oldest"] is None or row.oldest < use["oldest"]:
                use["oldest"] = row.oldest
        for w in serving:
            use = table.setdefault(w.workflow, {}).setdefault(
                w.version, {"by_status": {}, "oldest": None, "workers": 0, "names": []}
            )
            use["workers"], use["names"] = w.workers, w.names
        # A run not pinned to a version yet is taken by any live worker of its workflow.
        for versions in table.values():
            unpinned = versions.get(None)
            if unpinned is not None and unpinned["workers"] == 0:
                unpinned["workers"] = sum(u["workers"] for v, u in versions.items() if v)
        return [
            WorkflowVersions(
                workflow,
                [
                    VersionUse(
                        version=v,
                        runs=sum(u["by_status"].values()),
                        by_status=u["by_status"],
                        oldest=u["oldest"],
                        workers=u["workers"],
                        worker_names=u["names"],
                    )
                    for v, u in sorted(versions.items(), key=lambda kv: (kv[0] is not None, kv[0]))
                ],
            )
            for workflow, versions in sorted(table.items())
        ]

    async def settled(self, run_id: str) -> bool:
        """Whether the run is at rest: ended, or parked and not due now (a worker is not about
        to resume it). Raises NotFound."""
        async with self.pool.acquire() as conn:
            settled = await recorded.run_settled(conn, run_id=run_id)
        if settled is None:
            raise NotFound(f"no run {run_id}: check the run id")
        return settled

    async def wake(self, run_id: str, step: str | None = None) -> bool:
        """Fire the run's pending sleeps and wait timeouts now (only `step` when given),
        journaled as fired early; True if any fired. Audited as `run.wake`."""
        async with transaction(self.pool) as conn:
            if await store.lock_run(conn, run_id=run_id) is None:
                raise NotFound(f"no run {run_id}: check the run id")
            fired = await recorded.wake_run(conn, run_id=run_id, step=step)
            if fired:
                await audit_store.record(conn, "run.wake", run_id, {"steps": fired})
        if fired:
            self.waker.notify(RunReady())
        return bool(fired)


async def _with_journals(conn: Connection, rows: list[recorded.RecordedRow]) -> list[RecordedRun]:
    out: list[RecordedRun] = []
    for i in range(0, len(rows), _CHUNK):
        chunk = rows[i : i + _CHUNK]
        journals = await recorded.load_full_journals(conn, run_ids=[r.run_id for r in chunk])
        out += [
            RecordedRun(
                run_id=r.run_id,
                workflow=r.workflow,
                version=r.version,
                status=r.status,
                input=r.input,
                journal=journals[r.run_id],
                attempt=r.attempt,
                created_at=r.created_at,
            )
            for r in chunk
        ]
    return out
