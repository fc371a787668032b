"""Replay against golden journals with an in-memory writer (no I/O): recorded steps are never
re-executed, and changed code is caught as non-determinism."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ripple.workflows import WorkflowContext, workflow
from ripple.workflows.authoring.definition import WorkflowDefinition
from ripple.workflows.runtime.engine import ChildSpec, RunExecution, WaitSpec
from ripple.workflows.runtime.journal import Entry

JOURNALS = Path(__file__).parent / "journals"


@dataclass
class Facts:
    run_id: str = "run-1"
    workflow: str = "checkout"
    version: int = 1
    input: Any = None
    attempt: int = 1
    epoch: int = 1
    deadline: datetime | None = None
    trace: dict[str, str] | None = None
    step_count: int = 0
    recovered: bool = False
    recoveries: int = 0
    db_now: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class MemoryWriter:
    """In-memory RunWriter: keeps what a run would commit."""

    journal: dict[str, Entry] = field(default_factory=dict)
    final: tuple[str, Any, Any] | None = None

    def _put(self, entries: list[Entry]) -> None:
        for entry in entries:
            self.journal[entry.key] = entry

    async def flush(
        self,
        entries: list[Entry],
        step_count: int,
        trim: Sequence[str] = (),
        *,
        renew: bool = False,
    ) -> None:
        self._put(entries)
        for prefix in trim:
            for key in [k for k in self.journal if k.startswith(prefix)]:
                del self.journal[key]

    async def settle_race(
        self, entries: list[Entry], step_count: int, losers: Sequence[str]
    ) -> list[str]:
        self._put(entries)
        return []

    async def register_wait(
        self, entries: list[Entry], step_count: int, wait: WaitSpec
    ) -> tuple[bool, Any]:
        self._put([*entries, wait.entry])
        return False, None

    async def start_child(self, entries: list[Entry], step_count: int, child: ChildSpec) -> Entry:
        # As the real writer: the step's entry (pending on the new child) is what comes back.
        self._put([*entries, child.entry])
        return child.entry

    async def time_out(
        self, entries: list[Entry], step_count: int, entry: Entry, is_wait: bool
    ) -> Entry:
        self._put(entries)
        return entry

    async def suspend(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        wake_at: datetime,
        blocking_keys: list[str],
    ) -> datetime:
        self._put(entries)
        self.final = (status, None, None)
        return wake_at

    async def finish(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        output: Any,
        error: dict[str, Any] | None,
    ) -> None:
        self._put(entries)
        self.final = (status, output, error)

    async def retry_run(
        self, entries: list[Entry], step_count: int, delay: float, error: dict[str, Any]
    ) -> None:
        self.final = ("pending", None, error)


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


async def replay(definition: WorkflowDefinition[Any, Any]) -> MemoryWriter:
    inp, entries = golden("checkout_v1.json")
    writer = MemoryWriter()
    engine = RunExecution(
        Facts(input=inp),
        definition,
        entries,
        writer,
        max_steps=100,
        is_stopping=lambda: False,
        resolve=lambda name: None,
    )
    await asyncio.wait_for(engine.execute(), 5)
    return writer


async def test_replay__golden_journal_replays_without_executing_steps() -> None:
    writer = await replay(checkout_v1)
    assert writer.final == (
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
    writer = await replay(definition)
    assert writer.final is not None
    status, _, error = writer.final
    assert status == "failed"
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

    writer = await replay(sneaky)
    assert writer.final is not None
    assert writer.final[0] == "failed"
    assert writer.final[2]["type"] == "NonDeterminismError"
