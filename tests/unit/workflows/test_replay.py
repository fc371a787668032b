"""Replay against golden journals on the in-memory port (no I/O): recorded steps are never
re-executed, and changed code is caught as non-determinism."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from ripple.workflows import WorkflowContext, workflow
from ripple.workflows.authoring.definition import WorkflowDefinition
from ripple.workflows.journal import Entry
from ripple.workflows.runtime.memory import MemoryRun, MemoryRuns

JOURNALS = Path(__file__).parent / "journals"


def golden(name: str) -> tuple[Any, list[Entry]]:
    data = json.loads((JOURNALS / name).read_text())
    entries = [
        Entry(
            key=e["key"],
            seq=e["seq"],
            kind=e["kind"],
            status=e["status"],
            attempts=e["attempts"],
            output=e.get("output"),
            due_at=datetime.fromisoformat(e["due_at"]) if e.get("due_at") else None,
        )
        for e in data["entries"]
    ]
    return data["input"], entries


def must_not_run(*args: Any) -> Any:
    raise AssertionError("a recorded step was executed again")


@workflow(name="checkout", version=1)
async def checkout_v1(ctx: WorkflowContext, inp: dict[str, int]) -> dict[str, Any]:
    reservation = await ctx.step.run("reserve", must_not_run, inp["order"])
    await ctx.step.sleep("cool-off", 5)
    charges = [await ctx.step.run("charge", must_not_run) for _ in range(2)]
    return {"reservation": reservation, "charges": charges, "at": ctx.now().isoformat()}


@workflow(name="checkout", version=1)
async def checkout_reordered(ctx: WorkflowContext, inp: dict[str, int]) -> None:
    await ctx.step.sleep("cool-off", 5)
    await ctx.step.run("reserve", must_not_run, inp["order"])


@workflow(name="checkout", version=1)
async def checkout_kind_changed(ctx: WorkflowContext, inp: dict[str, int]) -> None:
    await ctx.step.run("reserve", must_not_run, inp["order"])
    await ctx.step.wait_for_event("cool-off")


@workflow(name="checkout", version=1)
async def checkout_renamed(ctx: WorkflowContext, inp: dict[str, int]) -> None:
    await ctx.step.run("reserve", must_not_run, inp["order"])
    await ctx.step.sleep("cooling", 5)


async def replay(definition: WorkflowDefinition[Any, Any]) -> MemoryRun:
    inp, entries = golden("checkout_v1.json")
    runs = MemoryRuns([definition])
    run_id = runs.start(definition, inp)
    runs.upsert(runs.run(run_id), entries)
    await asyncio.wait_for(runs.execute(run_id), 5)
    return runs.run(run_id)


async def test_replay__golden_journal_replays_without_executing_steps() -> None:
    run = await replay(checkout_v1)
    assert (run.status, run.output, run.error) == (
        "completed",
        {
            "reservation": "R-7",
            "charges": [{"paid": 70}, {"paid": 1}],
            "at": "2026-01-01T00:00:09+00:00",
        },
        None,
    )


@pytest.mark.parametrize(
    ("definition", "step", "recorded"),
    [
        (checkout_reordered, "cool-off", "run step 'reserve'"),
        (checkout_kind_changed, "cool-off", "sleep"),
        (checkout_renamed, "cooling", "sleep step 'cool-off'"),
    ],
)
async def test_replay__changed_workflow_fails_with_non_determinism(
    definition: WorkflowDefinition[Any, Any], step: str, recorded: str
) -> None:
    run = await replay(definition)
    error = run.error
    assert run.status == "failed"
    assert error is not None
    assert error["type"] == "NonDeterminismError"
    assert repr(step) in error["message"]
    assert recorded in error["message"]


async def test_replay__catching_the_error_in_workflow_code_still_fails_the_run() -> None:
    @workflow(name="checkout", version=1)
    async def sneaky(ctx: WorkflowContext, inp: dict[str, int]) -> str:
        try:
            await ctx.step.sleep("cool-off", 5)
        except Exception:
            return "swallowed"
        return "no"

    run = await replay(sneaky)
    assert run.status == "failed"
    assert run.error is not None
    assert run.error["type"] == "NonDeterminismError"
