"""Child workflows: success, failure, timeout, cancel cascade, parent links; Redis down."""

from __future__ import annotations

import asyncio

import pytest

from ripple.platform.core.config import Settings
from ripple.platform.core.ids import new_id
from ripple.workflows import (
    RetryPolicy,
    StepTimeoutError,
    WorkflowCanceled,
    WorkflowContext,
    WorkflowFailed,
    store,
    workflow,
)
from ripple.workflows.errors import LeaseLost
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runtime.writer import PgRunWriter, StepCommitter
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App, close_app, make_app


@workflow(name="child")
async def child(ctx: WorkflowContext, n: int) -> int:
    if n < 0:
        raise ValueError("negative")
    if n == 0:
        await ctx.step.sleep("forever", 3600)
    await ctx.step.run("double", lambda: n * 2)
    return n * 2


@workflow(name="parent")
async def parent(ctx: WorkflowContext, n: int) -> dict[str, object]:
    try:
        out = await ctx.step.run_workflow(child, n, timeout=0.5 if n == 0 else None)
    except StepTimeoutError as exc:
        return {"timeout": str(exc)}
    except WorkflowFailed as exc:
        return {"failed": exc.error["type"], "child": exc.run_id}
    return {"out": out}


async def children_of(app: App, run_id: str) -> list[str]:
    page = await app.workflows.list_runs(parent_run_id=run_id)
    return [r.run_id for r in page.items]


async def test_child__output_returns_to_the_parent(app: App) -> None:
    handle = await app.workflows.start(parent, 21)
    async with app.worker(parent, child):
        assert await handle.result(timeout=10) == {"out": 42}
    kids = await children_of(app, handle.run_id)
    assert len(kids) == 1
    kid = await app.workflows.get_run(kids[0])
    assert kid is not None
    assert kid.parent_run_id == handle.run_id
    assert kid.status == RunStatus.COMPLETED


async def test_child__failure_raises_workflow_failed_in_the_parent(app: App) -> None:
    handle = await app.workflows.start(parent, -1)
    async with app.worker(parent, child):
        out = await handle.result(timeout=10)
    kids = await children_of(app, handle.run_id)
    assert out == {"failed": "ValueError", "child": kids[0]}


async def test_child__timeout_fails_the_step_not_the_child(app: App) -> None:
    handle = await app.workflows.start(parent, 0)
    async with app.worker(parent, child):
        out = await handle.result(timeout=10)
        assert "timeout" in out
        kid = (await children_of(app, handle.run_id))[0]
        run = await app.workflows.get_run(kid)
        assert run is not None
        assert run.status == RunStatus.SLEEPING


@workflow(name="grandparent")
async def grandparent(ctx: WorkflowContext) -> None:
    await ctx.step.run_workflow("parent", 0, name="p")


async def test_child__cancel_cascades_to_active_descendants(app: App) -> None:
    app.workflows.register(parent, child)
    handle = await app.workflows.start(grandparent)
    async with app.worker(grandparent, parent, child):

        async def grandchild() -> str | None:
            kids = await children_of(app, handle.run_id)
            if not kids:
                return None
            grand = await children_of(app, kids[0])
            return grand[0] if grand else None

        grand_id = await assert_eventually(grandchild)
        assert grand_id is not None
        assert await app.workflows.cancel(handle.run_id)
        kid = (await children_of(app, handle.run_id))[0]
        for run_id in (handle.run_id, kid, grand_id):
            run = await app.workflows.get_run(run_id)
            assert run is not None
            assert run.status == RunStatus.CANCELED
            # the same error as a bulk cancel gives: each run is named in its own error
            assert run.error == {
                "type": "WorkflowCanceled",
                "message": f"run {run_id} was canceled",
            }
        with pytest.raises(WorkflowCanceled):
            await handle.result(timeout=5)


async def test_child__canceling_a_child_fails_its_parents_step(app: App) -> None:
    handle = await app.workflows.start(parent, 0)
    app.workflows.register(child)
    async with app.worker(parent, child):
        kid = await assert_eventually(lambda: children_of(app, handle.run_id))
        await app.workflows.cancel(kid[0])
        assert await handle.result(timeout=10) == {"failed": "WorkflowCanceled", "child": kid[0]}


@workflow(name="everything")
async def everything(ctx: WorkflowContext) -> list[object]:
    await ctx.step.sleep("nap", 0.05)
    got = await ctx.step.wait_for_event("go")
    kid = await ctx.step.run_workflow(child, 2)
    return [got, kid]


async def test_redis_down__everything_completes_by_polling(settings: Settings) -> None:
    down = settings.model_copy(update={"redis_url": "redis://127.0.0.1:1/0"})
    app = await make_app(down)
    other = await make_app(down)  # a second "process": hints from `app` never reach it
    try:
        handle = await app.workflows.start(everything)
        async with other.worker(everything, child):
            run_id = handle.run_id

            async def waiting() -> bool:
                run = await app.workflows.get_run(run_id)
                return run is not None and run.status == RunStatus.WAITING

            await assert_eventually(waiting)
            await app.workflows.signal(run_id, "go", {"ok": 1})
            assert await asyncio.wait_for(handle.result(), 15) == [{"ok": 1}, 4]
    finally:
        await close_app(other)
        await close_app(app)


flaky_children: dict[str, int] = {}


@workflow(name="flaky-child")
async def flaky_child(ctx: WorkflowContext, tag: str) -> str:
    flaky_children[tag] = flaky_children.get(tag, 0) + 1
    if flaky_children[tag] == 1:
        raise ValueError("first child fails")
    return f"ok after {flaky_children[tag]}"


@workflow(name="retrying-parent", retry=RetryPolicy(max_attempts=2, initial_interval=0.01))
async def retrying_parent(ctx: WorkflowContext, tag: str) -> str:
    out: str = await ctx.step.run_workflow(flaky_child, tag)
    return out


async def test_child__parent_retry_starts_a_fresh_child_for_the_failed_step(app: App) -> None:
    # The first child fails, so the parent's attempt fails; its retry re-runs the child step.
    # It used to find the failed child by its idempotency key, journal the step pending on it,
    # and wait forever (nothing reports an already-ended child).
    handle = await app.workflows.start(retrying_parent, "t1")
    async with app.worker(retrying_parent, flaky_child):
        assert await handle.result(timeout=15) == "ok after 2"
    kids = await app.workflows.list_runs(parent_run_id=handle.run_id)
    assert sorted(k.status for k in kids.items) == ["completed", "failed"]


async def test_cancel__takes_a_child_started_while_it_waited_for_the_parent(app: App) -> None:
    # The parent's start_child transaction holds the parent's row when cancel() arrives: the
    # child it inserts must be canceled too (the tree used to come from a snapshot taken
    # before cancel waited for that lock).
    parent_id, child_id = "p-" + new_id(), "c-" + new_id()
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, status, epoch, started_at) "
        "VALUES ($1, 'parent', 1, 'running', 1, now())",
        parent_id,
    )
    async with app.pool.acquire() as conn:
        starting = conn.transaction()
        await starting.start()
        entry = {"key": "k", "seq": 0, "kind": "child", "status": "pending", "attempts": 1}
        assert await store.flush_run(
            conn, run_id=parent_id, epoch=1, lease=30.0, step_count=1, entries=[entry]
        )
        assert await store.insert_child_run(
            conn,
            run_id=child_id,
            workflow="child",
            version=1,
            input=1,
            idempotency_key=f"{parent_id}:k",
            trace=None,
            parent_run_id=parent_id,
            parent_step_key="k",
            parent_step_seq=0,
        )
        cancel = asyncio.create_task(app.workflows.cancel(parent_id))
        await assert_eventually(lambda: _waiting_on_a_lock(app))
        await starting.commit()
    assert await cancel is True
    statuses = await app.pool.fetch(
        "SELECT run_id, status FROM ripple_runs WHERE run_id = ANY($1::text[])",
        [parent_id, child_id],
    )
    assert {r["run_id"]: r["status"] for r in statuses} == {
        parent_id: "canceled",
        child_id: "canceled",
    }


async def _waiting_on_a_lock(app: App) -> bool:
    return bool(
        await app.pool.fetchval(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
    )


async def test_child_finish_and_cancel_take_locks_parent_first(app: App) -> None:
    # cancel() locks the parent, then the tree; a finishing child used to lock itself, then
    # its parent: the two deadlocked (Postgres aborted one). Now the child takes its parent
    # first, so it simply waits for the cancel and is then fenced out.
    parent_id, child_id = "p-" + new_id(), "c-" + new_id()
    for run_id, parent_of, key in ((parent_id, None, None), (child_id, parent_id, "k")):
        await app.pool.execute(
            "INSERT INTO ripple_runs (run_id, workflow, version, status, epoch, started_at, "
            "parent_run_id, parent_step_key, parent_step_seq) "
            "VALUES ($1, 'w', 1, 'running', 1, now(), $2, $3, 0)",
            run_id,
            parent_of,
            key,
        )
    writer = PgRunWriter(
        app.pool,
        app.waker,
        run_id=child_id,
        epoch=1,
        workflow="w",
        lease=30.0,
        trace=None,
        may_have_waits=False,
        committer=StepCommitter(app.pool, lease=30.0),
        parent_run_id=parent_id,
    )
    async with app.pool.acquire() as conn:
        canceling = conn.transaction()
        await canceling.start()
        await store.lock_run(conn, run_id=parent_id)
        finishing = asyncio.create_task(writer.finish([], 1, "completed", 42, None))
        await assert_eventually(lambda: _waiting_on_a_lock(app))
        rows = await store.cancel_trees(conn, run_ids=[parent_id])
        await canceling.commit()
    assert {row.run_id for row in rows} == {parent_id, child_id}
    with pytest.raises(LeaseLost):
        await finishing


async def test_cancel__of_an_ended_run_is_false_though_it_ends_an_active_child(app: App) -> None:
    """`cancel` answers whether the run itself was still active; an ended parent's child that
    outlived its step's timeout is canceled along with it all the same."""
    handle = await app.workflows.start(parent, 0)
    async with app.worker(parent, child):
        assert "timeout" in await handle.result(timeout=10)
        kid = (await children_of(app, handle.run_id))[0]
        run = await app.workflows.get_run(kid)
        assert run is not None
        assert run.status not in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED)
        assert await app.workflows.cancel(handle.run_id) is False
        run = await app.workflows.get_run(kid)
        assert run is not None
        assert run.status == RunStatus.CANCELED
