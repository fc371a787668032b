"""Child workflows: success, failure, timeout, cancel cascade, parent links; Redis down."""

from __future__ import annotations

import asyncio

import pytest

from ripple.platform.config import Settings
from ripple.workflows import (
    StepTimeoutError,
    WorkflowCanceled,
    WorkflowContext,
    WorkflowFailed,
    workflow,
)
from ripple.workflows.records import RunStatus
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
        assert await app.workflows.cancel(handle.run_id)
        kid = (await children_of(app, handle.run_id))[0]
        for run_id in (handle.run_id, kid, grand_id):
            run = await app.workflows.get_run(run_id)
            assert run is not None
            assert run.status == RunStatus.CANCELED
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
