"""The same code never diverges from its own journals, whatever the run did and wherever it
stopped: loops, joins, races, children, journaled values, retries and compensations."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from ripple.workflows import Break, Continue, WorkflowContext, workflow
from ripple.workflows.errors import NonRetriableError
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runs.verification import RecordedRun
from ripple.workflows.runtime.memory import MemoryRuns
from ripple.workflows.runtime.verify import verify_runs

calls: Counter[str] = Counter()


def count(name: str) -> str:
    calls[name] += 1
    return name


def flaky() -> str:
    calls["flaky"] += 1
    if calls["flaky"] < 2:
        raise ValueError("first attempt fails")
    return "ok"


def boom() -> str:
    raise NonRetriableError("no")


@workflow(name="zoo-child")
async def child(ctx: WorkflowContext, n: int) -> int:
    await ctx.step.run("double", count, "double")
    return n * 2


@workflow(name="zoo")
async def zoo(ctx: WorkflowContext, inp: dict[str, Any]) -> Any:
    stamp = ctx.now()
    await ctx.step.run("flaky", flaky)

    async def body(ctx: WorkflowContext, i: int) -> Continue | Break:
        await ctx.step.run("tick", count, "tick")
        return Continue(i + 1) if i < 3 else Break(i)

    looped = await ctx.step.loop("ticks", body, 0, keep=2)
    joined = await ctx.step.join(
        "both",
        {"a": lambda: ctx.step.run("a", count, "a"), "b": lambda: ctx.step.run("b", count, "b")},
    )
    doubled = await ctx.step.run_workflow(child, 21)
    winner = await ctx.step.race(
        "gate",
        {
            "signal": lambda: ctx.step.wait_for_event("go"),
            "timer": lambda: ctx.step.sleep("later", timedelta(hours=1)),
        },
    )
    await ctx.step.run("charge", count, "charge", compensate=lambda: count("refund"))
    if inp.get("fail"):
        await ctx.step.run("boom", boom)
    return [str(stamp), looped, joined, doubled, winner]


async def test_verify__the_same_code_never_diverges_from_its_journals() -> None:
    runs = MemoryRuns([zoo, child])
    waiting = runs.start(zoo, {})
    done = runs.start(zoo, {})
    failed = runs.start(zoo, {"fail": True})
    for _ in range(10):  # until every zoo run waits at the race (children complete meanwhile)
        runs.now += timedelta(minutes=1)  # past the retry's backoff, far from the race's timer
        for run in list(runs.runs.values()):
            if run.status in (RunStatus.PENDING, RunStatus.RUNNING) or (
                run.status in (RunStatus.WAITING, RunStatus.SLEEPING)
                and run.available_at <= runs.now
            ):
                await runs.execute(run.run_id)
    assert {runs.run(r).status for r in (waiting, done, failed)} == {RunStatus.WAITING}
    for run_id in (done, failed):
        runs.signal(run_id, "go", {"now": True})
        await runs.execute(run_id)
    assert runs.run(done).status == RunStatus.COMPLETED
    assert runs.run(failed).status == RunStatus.FAILED
    recorded = [
        RecordedRun(r.run_id, r.workflow, r.version, r.status, r.input, r.entries)
        for r in runs.runs.values()
    ]
    calls.clear()
    report = await verify_runs(recorded, [zoo, child])
    assert report.runs_checked == 6  # three zoo runs and their children
    assert report.divergences == []
    assert calls == {}


@workflow(name="rounds")
async def rounds(ctx: WorkflowContext) -> Any:
    async def body(ctx: WorkflowContext, i: int) -> Continue | Break:
        await ctx.step.run("ask", count, "ask")
        await ctx.step.join(
            "votes",
            {
                "yes": lambda: ctx.step.wait_for_event("yes"),
                "log": lambda: ctx.step.run("log", count, "log"),
            },
        )
        return Continue(i + 1) if i < 2 else Break(i)

    return await ctx.step.loop("round", body, 0)


@workflow(name="rounds")
async def rounds_renamed(ctx: WorkflowContext) -> Any:
    async def body(ctx: WorkflowContext, i: int) -> Continue | Break:
        await ctx.step.run("question", count, "ask")
        await ctx.step.join(
            "votes",
            {
                "yes": lambda: ctx.step.wait_for_event("yes"),
                "log": lambda: ctx.step.run("log", count, "log"),
            },
        )
        return Continue(i + 1) if i < 2 else Break(i)

    return await ctx.step.loop("round", body, 0)


async def test_verify__a_run_waiting_inside_a_loop_and_a_join() -> None:
    runs = MemoryRuns([rounds])
    run_id = runs.start(rounds)
    await runs.execute(run_id)
    runs.signal(run_id, "yes", {})
    await runs.execute(run_id)  # the second iteration now waits
    run = runs.run(run_id)
    assert run.status == RunStatus.WAITING
    assert "round/~1/votes/yes/yes" in run.journal
    recorded = [RecordedRun(run.run_id, run.workflow, run.version, run.status, None, run.entries)]
    calls.clear()
    assert (await verify_runs(recorded, [rounds])).divergences == []
    [renamed] = (await verify_runs(recorded, [rounds_renamed])).divergences
    assert renamed.expected == "run 'round/~1/ask'"
    assert calls == {}
