"""The journal/writer port's contract, run against both implementations: `PgRunWriter` on
Postgres and `MemoryRunWriter` in memory. It keeps the in-memory port honest: the unit tests of
the engine's decisions are only as true as these rules are shared."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

import pytest

from ripple.platform.core.ids import new_id
from ripple.workflows import WorkflowContext, store, workflow
from ripple.workflows.errors import LeaseLost
from ripple.workflows.journal import Entry, StepStatus
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runtime.memory import MemoryRuns, MemoryRunWriter
from ripple.workflows.runtime.ports import ChildSpec, RunWriter, WaitSpec
from ripple.workflows.runtime.writer import PgRunWriter, StepCommitter
from tests.integration.workflows.conftest import App

FAR = datetime(2100, 1, 1, tzinfo=UTC)


@workflow(name="w")
async def w(ctx: WorkflowContext) -> None:
    return None


class Backend(Protocol):
    async def new_run(self) -> str: ...
    async def claim(self, run_id: str) -> RunWriter: ...
    async def journal(self, run_id: str) -> dict[str, Entry]: ...
    async def status(self, run_id: str) -> str: ...
    async def signal(self, run_id: str, name: str, payload: Any) -> bool: ...


class PgBackend:
    def __init__(self, app: App) -> None:
        self.app = app
        self.committer = StepCommitter(app.pool, lease=30.0)

    async def new_run(self) -> str:
        run_id = new_id()
        await self.app.pool.execute(
            "INSERT INTO ripple_runs (run_id, workflow, version) VALUES ($1, 'w', 1)", run_id
        )
        return run_id

    async def claim(self, run_id: str) -> RunWriter:
        row = await self.app.pool.fetchrow(
            "UPDATE ripple_runs SET status = 'running', epoch = epoch + 1, started_at = now() "
            "WHERE run_id = $1 RETURNING epoch, parent_run_id",
            run_id,
        )
        assert row is not None
        return PgRunWriter(
            self.app.pool,
            self.app.waker,
            run_id=run_id,
            epoch=row["epoch"],
            workflow="w",
            lease=30.0,
            trace=None,
            may_have_waits=True,
            committer=self.committer,
            parent_run_id=row["parent_run_id"],
        )

    async def journal(self, run_id: str) -> dict[str, Entry]:
        rows = (await store.load_journals(self.app.pool, run_ids=[run_id]))[run_id]
        return {row.key: Entry.from_row(row) for row in rows}

    async def status(self, run_id: str) -> str:
        run = await store.read_run(self.app.pool, run_id=run_id)
        assert run is not None
        return run.status

    async def signal(self, run_id: str, name: str, payload: Any) -> bool:
        return (await self.app.workflows.signal(run_id, name, payload)).delivered


class MemoryBackend:
    def __init__(self) -> None:
        self.runs = MemoryRuns([w])

    async def new_run(self) -> str:
        return self.runs.start(w)

    async def claim(self, run_id: str) -> RunWriter:
        return MemoryRunWriter(self.runs, run_id, self.runs.claim(run_id).epoch)

    async def journal(self, run_id: str) -> dict[str, Entry]:
        return dict(self.runs.run(run_id).journal)

    async def status(self, run_id: str) -> str:
        return self.runs.run(run_id).status

    async def signal(self, run_id: str, name: str, payload: Any) -> bool:
        return self.runs.signal(run_id, name, payload)


@pytest.fixture(params=["postgres", "memory"])
def backend(request: pytest.FixtureRequest) -> Backend:
    if request.param == "memory":
        return MemoryBackend()
    app: App = request.getfixturevalue("app")  # a database only where one is used
    return PgBackend(app)


def now() -> datetime:
    return datetime.now(UTC)


def done(key: str, seq: int, output: Any) -> Entry:
    return Entry.attempt(key, seq, "run", 1, now()).completed(output, now())


async def test_writer_contract__a_superseded_claim_cannot_write(backend: Backend) -> None:
    run_id = await backend.new_run()
    stale = await backend.claim(run_id)
    current = await backend.claim(run_id)
    with pytest.raises(LeaseLost):
        await stale.flush([done("a", 0, 1)], 1)
    with pytest.raises(LeaseLost):
        await stale.finish([done("a", 0, 1)], 1, RunStatus.COMPLETED, 1, None)
    with pytest.raises(LeaseLost):
        await stale.suspend([], 1, RunStatus.SLEEPING, FAR, [])
    assert await backend.journal(run_id) == {}
    await current.flush([done("a", 0, 2)], 1)
    assert (await backend.journal(run_id))["a"].output == 2


async def test_writer_contract__a_recorded_result_is_never_changed(backend: Backend) -> None:
    run_id = await backend.new_run()
    writer = await backend.claim(run_id)
    await writer.flush([Entry.attempt("a", 0, "run", 1, now())], 1)
    assert (await backend.journal(run_id))["a"].status == StepStatus.RUNNING
    await writer.flush([done("a", 0, "first")], 1)
    await writer.flush([done("a", 0, "second")], 1)
    entry = (await backend.journal(run_id))["a"]
    assert (entry.status, entry.output) == (StepStatus.COMPLETED, "first")


async def test_writer_contract__a_suspended_run_is_owned_by_no_execution(
    backend: Backend,
) -> None:
    run_id = await backend.new_run()
    writer = await backend.claim(run_id)
    assert await writer.suspend([done("a", 0, 1)], 1, RunStatus.SLEEPING, FAR, []) == FAR
    assert await backend.status(run_id) == RunStatus.SLEEPING
    with pytest.raises(LeaseLost):
        await writer.flush([], 1)
    assert (await backend.journal(run_id))["a"].output == 1


async def test_writer_contract__a_wait_consumes_a_matching_buffered_signal(
    backend: Backend,
) -> None:
    run_id = await backend.new_run()
    payload = {"order": {"id": 7, "total": 3}, "tags": ["a", "b"]}
    assert not await backend.signal(run_id, "go", payload)  # no wait yet: buffered
    writer = await backend.claim(run_id)
    miss = Entry.begun("miss", 0, "wait", now())
    assert await writer.register_wait([], 1, WaitSpec(miss, "go", None, {"tags": ["c"]})) == (
        False,
        None,
    )
    hit = Entry.begun("hit", 1, "wait", now())
    match = {"order": {"id": 7}, "tags": ["b"]}
    assert await writer.register_wait([], 2, WaitSpec(hit, "go", None, match)) == (True, payload)
    journal = await backend.journal(run_id)
    assert (journal["hit"].status, journal["hit"].output) == (StepStatus.COMPLETED, payload)
    assert journal["miss"].status == StepStatus.PENDING
    # the open wait resolves a suspension at once
    available = await writer.suspend([], 2, RunStatus.WAITING, FAR, ["hit"])
    assert available < FAR


async def test_writer_contract__a_wait_times_out_with_none_unless_resolved(
    backend: Backend,
) -> None:
    run_id = await backend.new_run()
    writer = await backend.claim(run_id)
    wait = Entry.begun("w", 0, "wait", now(), due_at=now())
    assert await writer.register_wait([], 1, WaitSpec(wait, "go", None, None)) == (False, None)
    final = await writer.time_out([], 1, wait, True)
    assert (final.status, final.output) == (StepStatus.COMPLETED, None)
    assert not await backend.signal(run_id, "go", {"late": True})  # the wait is gone


async def test_writer_contract__a_retry_keeps_only_completed_steps(backend: Backend) -> None:
    run_id = await backend.new_run()
    writer = await backend.claim(run_id)
    retrying = Entry.attempt("c", 2, "run", 1, now()).retrying(1, {"type": "E"}, FAR)
    entries = [done("a", 0, 1), Entry.attempt("b", 1, "run", 1, now()), retrying]
    await writer.retry_run(entries, 3, 0.0, {"type": "ValueError", "message": "x"})
    assert set(await backend.journal(run_id)) == {"a"}
    assert await backend.status(run_id) == RunStatus.PENDING


async def test_writer_contract__a_child_is_started_once_and_reports_to_its_parent(
    backend: Backend,
) -> None:
    parent_id = await backend.new_run()
    parent = await backend.claim(parent_id)
    entry = Entry.begun("kid", 0, "child", now(), output={"runId": (kid_id := new_id())})
    spec = ChildSpec(entry, kid_id, "w", 1, None, f"{parent_id}:kid")
    assert (await parent.start_child([], 1, spec)).status == StepStatus.PENDING
    await parent.suspend([], 1, RunStatus.WAITING, FAR, ["kid"])

    kid = await backend.claim(kid_id)
    await kid.finish([], 0, RunStatus.COMPLETED, 42, None)
    step = (await backend.journal(parent_id))["kid"]
    assert (step.status, step.output) == (StepStatus.COMPLETED, 42)

    # started again under the same key (its entry lost): the ended child's result comes back
    parent = await backend.claim(parent_id)
    other = new_id()
    lost = Entry.begun("kid", 0, "child", now(), output={"runId": other})
    found = await parent.start_child([], 2, ChildSpec(lost, other, "w", 1, None, spec.key))
    assert (found.status, found.output) == (StepStatus.COMPLETED, 42)


async def test_writer_contract__a_child_step_times_out_as_failed(backend: Backend) -> None:
    parent_id = await backend.new_run()
    parent = await backend.claim(parent_id)
    kid_id = new_id()
    entry = Entry.begun("kid", 0, "child", now(), output={"runId": kid_id}, due_at=now())
    await parent.start_child([], 1, ChildSpec(entry, kid_id, "w", 1, None, f"{parent_id}:k"))
    final = await parent.time_out([], 1, entry, False)
    assert final.status == StepStatus.FAILED
    assert final.error is not None
    assert final.error["type"] == "StepTimeout"
    assert await backend.status(kid_id) == RunStatus.PENDING  # the child keeps running
