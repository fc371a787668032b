"""A database outage met by a run's own journal write (the commit before a step body, raised
into the workflow function as `JournalUnavailable`) is not the workflow's failure: the run is
neither failed nor compensated, a race does not journal it as its outcome, its execution is
abandoned, and the next claim completes it from what was committed. A step body's own
`Unavailable` stays that step's error."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from ripple.platform.errors import Unavailable
from ripple.workflows import RetryPolicy, WorkflowContext, workflow
from ripple.workflows.errors import JournalUnavailable
from ripple.workflows.journal import Entry
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runtime.memory import MemoryRuns, MemoryRunWriter

calls: Counter[str] = Counter()


def reserve(order: int) -> str:
    calls["reserve"] += 1
    return f"R-{order}"


def release(reservation: str) -> None:
    calls["release"] += 1


def charge(reservation: str) -> str:
    calls["charge"] += 1
    return f"paid {reservation}"


@workflow(name="outage-checkout")
async def checkout(ctx: WorkflowContext, order: int) -> str:
    reservation = await ctx.step.run("reserve", reserve, order, compensate=release)
    return await ctx.step.run("charge", charge, reservation)


@pytest.fixture
def unavailable_once(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The in-memory writer's next flush fails as a write to a silent primary does."""
    failed: Counter[str] = Counter()
    flush = MemoryRunWriter.flush

    async def flaky(self: MemoryRunWriter, entries: list[Entry], *a: Any, **kw: Any) -> None:
        if not failed["flush"]:
            failed["flush"] += 1
            raise Unavailable("database did not answer within RIPPLE_DB_TIMEOUT")
        await flush(self, entries, *a, **kw)

    monkeypatch.setattr(MemoryRunWriter, "flush", flaky)
    return failed


async def test_outage_in_run__abandons_the_execution_instead_of_failing_the_run(
    unavailable_once: Counter[str],
) -> None:
    calls.clear()
    runs = MemoryRuns([checkout])
    run_id = runs.start(checkout, 3)
    with pytest.raises(JournalUnavailable):
        await runs.execute(run_id)
    assert unavailable_once["flush"] == 1
    run = runs.run(run_id)
    assert (run.status, run.error) == (RunStatus.RUNNING, None)  # left for the next claim
    assert calls["release"] == 0  # no compensation for an outage
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, "paid R-3")
    # reserve's result was never committed, so it ran again; charge ran once.
    assert calls == {"reserve": 2, "charge": 1}


def call_ripple_during_outage() -> None:
    raise Unavailable("database did not answer within RIPPLE_DB_TIMEOUT")


@workflow(name="outage-in-body")
async def body_outage(ctx: WorkflowContext) -> None:
    await ctx.step.run("call", call_ripple_during_outage, retry=RetryPolicy(max_attempts=1))


async def test_outage_in_run__a_step_bodys_own_unavailable_stays_the_steps_error() -> None:
    runs = MemoryRuns([body_outage])
    run_id = runs.start(body_outage)
    outcome = await runs.execute(run_id)
    run = runs.run(run_id)
    assert (outcome.status, run.status) == (RunStatus.FAILED, RunStatus.FAILED)
    assert run.error is not None
    assert run.error["type"] == "Unavailable"


async def slow() -> str:
    await asyncio.Event().wait()  # never finishes: the race is decided by branch `a`
    return "slow"


@workflow(name="outage-race")
async def racing(ctx: WorkflowContext) -> object:
    async def two_steps() -> str:
        first = await ctx.step.run("x", reserve, 1)
        return await ctx.step.run("y", charge, first)  # its commit of x meets the outage

    return await ctx.step.race("pick", {"a": two_steps, "b": lambda: ctx.step.run("z", slow)})


async def test_outage_in_run__a_race_does_not_journal_an_outage_as_its_outcome(
    unavailable_once: Counter[str],
) -> None:
    calls.clear()
    runs = MemoryRuns([racing])
    run_id = runs.start(racing)
    with pytest.raises(JournalUnavailable):
        await runs.execute(run_id)
    assert unavailable_once["flush"] == 1
    assert runs.run(run_id).status == RunStatus.RUNNING
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, ["a", "paid R-1"])
