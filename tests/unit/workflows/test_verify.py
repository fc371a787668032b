"""Replaying recorded journals against changed code (`verify_runs`): order changes, patches,
composition and the end of the journal are reported; no step body runs."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

from ripple.platform.errors import InvalidInput
from ripple.workflows import WorkflowContext, workflow
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runs.verification import RecordedRun, dump_runs, load_runs
from ripple.workflows.runtime.memory import MemoryRuns
from ripple.workflows.runtime.verify import verify_runs

calls: Counter[str] = Counter()


def step(name: str) -> Any:
    def body() -> str:
        calls[name] += 1
        return name

    body.__name__ = name
    return body


@workflow(name="order")
async def code_a(ctx: WorkflowContext) -> str:
    await ctx.step.run("reserve", step("reserve"))
    await ctx.step.run("charge", step("charge"))
    got = await ctx.step.wait_for_event("shipped", timeout=timedelta(days=1))
    return "done" if got else "late"


@workflow(name="order")
async def code_b(ctx: WorkflowContext) -> str:  # reorders two steps in the same version
    await ctx.step.run("charge", step("charge"))
    await ctx.step.run("reserve", step("reserve"))
    got = await ctx.step.wait_for_event("shipped", timeout=timedelta(days=1))
    return "done" if got else "late"


@workflow(name="order")
async def code_c(ctx: WorkflowContext) -> str:  # adds a step behind a patch
    await ctx.step.run("reserve", step("reserve"))
    if ctx.patched("fraud-check"):
        await ctx.step.run("fraud", step("fraud"))
    await ctx.step.run("charge", step("charge"))
    got = await ctx.step.wait_for_event("shipped", timeout=timedelta(days=1))
    return "done" if got else "late"


@workflow(name="order")
async def code_d(ctx: WorkflowContext) -> str:  # adds a step without a patch
    await ctx.step.run("reserve", step("reserve"))
    await ctx.step.run("charge", step("charge"))
    got = await ctx.step.wait_for_event("shipped", timeout=timedelta(days=1))
    await ctx.step.run("email", step("email"))
    return "done" if got else "late"


async def recorded(workflow: Any, *, completed: int, waiting: int) -> list[RecordedRun]:
    runs = MemoryRuns([workflow])
    done = [runs.start(workflow) for _ in range(completed)]
    waits = [runs.start(workflow) for _ in range(waiting)]
    for run_id in done + waits:
        await runs.execute(run_id)
    for run_id in done:
        runs.signal(run_id, "shipped", {"ok": True})
    for run_id in done:
        await runs.execute(run_id)
    out = []
    for run_id in done + waits:
        run = runs.run(run_id)
        assert run.status == (RunStatus.COMPLETED if run_id in done else RunStatus.WAITING)
        out.append(
            RecordedRun(run.run_id, run.workflow, run.version, run.status, run.input, run.entries)
        )
    calls.clear()
    return out


async def test_verify__a_reorder_diverges_every_run_at_the_first_position() -> None:
    runs = await recorded(code_a, completed=2, waiting=3)
    report = await verify_runs(runs, [code_b])
    assert not report.ok
    assert report.runs_checked == 5
    assert sorted(d.run_id for d in report.divergences) == sorted(r.run_id for r in runs)
    first = report.divergences[0]
    assert (first.position, first.expected, first.actual) == (
        0,
        "run 'reserve'",
        "run 'charge'",
    )
    assert calls == {}


async def test_verify__a_patched_step_and_the_same_code_pass() -> None:
    runs = await recorded(code_a, completed=2, waiting=2)
    assert (await verify_runs(runs, [code_a])).divergences == []
    report = await verify_runs(runs, [code_c])
    assert report.ok
    assert report.divergences == []
    assert report.runs_checked == 4
    assert calls == {}


async def test_verify__a_step_past_a_completed_journal_is_a_warning_only() -> None:
    runs = await recorded(code_a, completed=1, waiting=1)
    report = await verify_runs(runs, [code_d])
    assert report.ok  # the waiting run reaches the new step only after its wait
    [warning] = report.divergences
    assert warning.status == RunStatus.COMPLETED
    assert warning.actual == "run 'email'"
    assert calls == {}


async def test_verify__the_export_format_round_trips() -> None:
    runs = await recorded(code_a, completed=1, waiting=1)
    again = load_runs(dump_runs(runs))
    assert [(r.run_id, r.status, [e.key for e in r.journal]) for r in again] == [
        (r.run_id, r.status, [e.key for e in r.journal]) for r in runs
    ]
    assert (await verify_runs(again, [code_b])).runs_checked == 2
    assert [r.journal for r in again] == [sorted(r.journal, key=lambda e: e.seq) for r in runs]


@workflow(name="quote")
async def race_a(ctx: WorkflowContext) -> Any:
    return await ctx.step.race(
        "answer-or-timeout",
        {
            "answer": lambda: ctx.step.wait_for_event("answer"),
            "timeout": lambda: ctx.step.sleep("cool-off", timedelta(days=1)),
        },
    )


@workflow(name="quote")
async def race_renamed_branch(ctx: WorkflowContext) -> Any:
    return await ctx.step.race(
        "answer-or-timeout",
        {
            "reply": lambda: ctx.step.wait_for_event("answer"),
            "timeout": lambda: ctx.step.sleep("cool-off", timedelta(days=1)),
        },
    )


@workflow(name="quote")
async def race_renamed_step(ctx: WorkflowContext) -> Any:
    return await ctx.step.race(
        "answer-or-timeout",
        {
            "answer": lambda: ctx.step.wait_for_event("reply"),
            "timeout": lambda: ctx.step.sleep("cool-off", timedelta(days=1)),
        },
    )


async def recorded_race(*, finished: bool) -> list[RecordedRun]:
    runs = MemoryRuns([race_a])
    run_id = runs.start(race_a)
    await runs.execute(run_id)
    if finished:
        runs.signal(run_id, "answer", {"yes": True})
        await runs.execute(run_id)
    run = runs.run(run_id)
    return [RecordedRun(run.run_id, run.workflow, run.version, run.status, None, run.entries)]


async def test_verify__a_race_in_flight_checks_its_branches_and_their_steps() -> None:
    waiting = await recorded_race(finished=False)
    assert waiting[0].status == RunStatus.WAITING
    assert (await verify_runs(waiting, [race_a])).divergences == []
    [branch] = (await verify_runs(waiting, [race_renamed_branch])).divergences
    assert "'answer'" in branch.expected
    assert "'reply'" in branch.actual
    [step] = (await verify_runs(waiting, [race_renamed_step])).divergences
    assert step.expected == "wait 'answer-or-timeout/answer/answer'"
    assert step.actual == "no such call"


async def test_verify__a_finished_race_checks_its_winner_is_still_a_branch() -> None:
    done = await recorded_race(finished=True)
    assert done[0].status == RunStatus.COMPLETED
    assert (await verify_runs(done, [race_a])).divergences == []
    [winner] = (await verify_runs(done, [race_renamed_branch])).divergences
    assert winner.status == RunStatus.COMPLETED
    assert "'answer'" in winner.expected


@workflow(name="refused-race")
async def refused_race(ctx: WorkflowContext) -> str:
    try:
        await ctx.step.race("pick", [lambda: ctx.step.sleep("nap", 1)])  # type: ignore[arg-type]
    except InvalidInput:
        return "refused"
    return "raced"


async def test_verify__a_race_refused_in_the_run_is_refused_in_the_replay() -> None:
    """Branches that are not a mapping reach the composition's check in a replay too, so the
    replay takes the path the run took."""
    runs = MemoryRuns([refused_race])
    run_id = runs.start(refused_race)
    await runs.execute(run_id)
    run = runs.run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, "refused")
    recorded_run = RecordedRun(run.run_id, run.workflow, run.version, run.status, None, run.entries)
    report = await verify_runs([recorded_run], [refused_race])
    assert (report.runs_checked, report.divergences) == (1, [])
