"""NaN and ±Infinity are refused wherever workflow JSON enters (run inputs,
child inputs, signal payloads), never stored as `null`; nothing is written."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from ripple.platform.errors import InvalidInput
from ripple.workflows import RetryPolicy, WorkflowContext, WorkflowFailed, workflow
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App
from tests.integration.workflows.test_waits import approval, is_waiting

NON_FINITE = [float("nan"), float("inf"), float("-inf")]


class Point(BaseModel):
    x: float


@workflow(name="typed-point")
async def typed_point(ctx: WorkflowContext, inp: Point) -> float:
    return inp.x


@workflow(name="raw-input")
async def raw_input(ctx: WorkflowContext, inp: Any) -> Any:
    return inp


@pytest.mark.parametrize("bad", NON_FINITE)
async def test_start_refuses_non_finite_input(app: App, bad: float) -> None:
    for workflow_ref, value in (
        (raw_input, {"a": [1, {"b": bad}]}),
        (raw_input, bad),
        ("raw-input", {"a": bad}),  # by name, unknown to this client: no input type
        ("never-registered", [bad]),
        (typed_point, {"x": bad}),
        (typed_point, Point(x=bad)),
    ):
        with pytest.raises(InvalidInput) as caught:
            await app.workflows.start(workflow_ref, value)
        assert caught.value.field == "input"
        assert "JSON cannot hold" in caught.value.message
        assert isinstance(caught.value, ValueError)
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_runs") == 0


async def test_signal_refuses_non_finite_payload(app: App) -> None:
    handle = await app.workflows.start(approval, None)
    async with app.worker(approval):
        await assert_eventually(lambda: is_waiting(app, handle.run_id))
        for bad in NON_FINITE:
            with pytest.raises(InvalidInput) as caught:
                await app.workflows.signal(handle.run_id, "approved", {"v": [bad]})
            assert caught.value.field == "payload"
            with pytest.raises(InvalidInput):
                await app.workflows.signal_matching("anything", {"v": bad})
        assert await app.pool.fetchval("SELECT count(*) FROM ripple_signals") == 0
        assert await is_waiting(app, handle.run_id)
        await app.workflows.signal(handle.run_id, "approved", {"v": 1.5})
        assert await handle.result(timeout=10) == {"v": 1.5}


@workflow(name="nan-parent")
async def nan_parent(ctx: WorkflowContext, typed: bool) -> str:
    try:
        if typed:
            await ctx.step.run_workflow(typed_point, {"x": float("nan")})
        else:
            await ctx.step.run_workflow(raw_input, {"x": float("inf")})
    except InvalidInput as exc:
        return f"refused: {exc.message}"
    return "started"


@pytest.mark.parametrize("typed", [True, False])
async def test_child_input_refuses_non_finite(app: App, typed: bool) -> None:
    handle = await app.workflows.start(nan_parent, typed)
    async with app.worker(nan_parent, typed_point, raw_input):
        out = await handle.result(timeout=10)
    assert out.startswith("refused: value contains"), out
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_runs") == 1


@workflow(name="nan-step")
async def nan_step(ctx: WorkflowContext) -> Any:
    return await ctx.step.run("nan", lambda: {"v": float("nan")}, retry=RetryPolicy(max_attempts=1))


async def test_step_result_with_nan_fails_instead_of_storing_null(app: App) -> None:
    handle = await app.workflows.start(nan_step)
    async with app.worker(nan_step):
        with pytest.raises(WorkflowFailed) as caught:
            await handle.result(timeout=10)
    assert caught.value.error["type"] == "InvalidInput"


async def test_strings_that_spell_nan_are_fine(app: App) -> None:
    value = {"s": "NaN", "t": ["-Infinity", {"u": "Infinity NaN"}], "n": 1.5}
    handle = await app.workflows.start(raw_input, value)
    run = await app.workflows.get_run(handle.run_id)
    assert run is not None
    assert run.input == value
