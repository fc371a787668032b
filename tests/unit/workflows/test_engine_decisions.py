"""The engine's decisions at unit speed, on the in-memory port (`MemoryRuns`): replay after
suspension, non-determinism, race/join/loop, step retries and saga compensation. Each mirrors a
behaviour the integration suite specifies against Postgres."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from ripple.workflows import (
    Break,
    Continue,
    JoinError,
    NonRetriableError,
    RetryAfterError,
    RetryPolicy,
    RollbackError,
    WorkflowContext,
    workflow,
)
from ripple.workflows.authoring.definition import WorkflowDefinition
from ripple.workflows.journal import StepStatus
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runtime.memory import MemoryRuns

calls: Counter[str] = Counter()
log: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()
    log.clear()


def counted(name: str, value: Any = None) -> Any:
    calls[name] += 1
    return value if value is not None else name


# -- replay and non-determinism ------------------------------------------------------------------


@workflow(name="order")
async def order_v1(ctx: WorkflowContext) -> list[str]:
    a = await ctx.step.run("reserve", counted, "reserve")
    await ctx.step.wait_for_event("paid")
    b = await ctx.step.run("ship", counted, "ship")
    return [a, b]


@workflow(name="order")
async def order_reordered(ctx: WorkflowContext) -> None:
    await ctx.step.wait_for_event("paid")
    await ctx.step.run("reserve", counted, "reserve")


@workflow(name="order")
async def order_renamed(ctx: WorkflowContext) -> None:
    await ctx.step.run("reserve-stock", counted, "reserve")
    await ctx.step.wait_for_event("paid")


@workflow(name="order")
async def order_kind_changed(ctx: WorkflowContext) -> None:
    await ctx.step.sleep("reserve", 1)


async def suspended_order() -> tuple[MemoryRuns, str]:
    runs = MemoryRuns([order_v1])
    run_id = runs.start(order_v1)
    await runs.run_until_idle()
    assert runs.run(run_id).status == RunStatus.WAITING
    runs.signal(run_id, "paid", {"amount": 5})
    return runs, run_id


async def test_replay__a_resumed_run_returns_recorded_results_without_executing_them() -> None:
    runs, run_id = await suspended_order()
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, ["reserve", "ship"])
    assert calls == {"reserve": 1, "ship": 1}
    assert [e.key for e in run.entries] == ["reserve", "paid", "ship"]


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        (
            order_reordered,
            "step 'paid': the code now calls 'wait' but the journal recorded "
            "\"run step 'reserve'\"",
        ),
        (
            order_renamed,
            "step 'reserve-stock': the code now calls 'run' but the journal "
            "recorded \"run step 'reserve'\"",
        ),
        (
            order_kind_changed,
            "step 'reserve': the code now calls 'sleep' but the journal recorded 'run'",
        ),
    ],
)
async def test_replay__code_changed_under_a_suspended_run_fails_it_as_non_determinism(
    changed: WorkflowDefinition[Any, Any], message: str
) -> None:
    runs, run_id = await suspended_order()
    runs.definitions["order"] = changed
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert run.error["type"] == "NonDeterminismError"
    assert message in run.error["message"]
    assert calls == {"reserve": 1}  # nothing executed on the changed code


# -- race, join, loop ----------------------------------------------------------------------------


@workflow(name="child-waits")
async def child_waits(ctx: WorkflowContext) -> object:
    return await ctx.step.wait_for_event("never")


@workflow(name="approve")
async def approve(ctx: WorkflowContext) -> dict[str, Any]:
    winner, value = await ctx.step.race(
        "decide",
        {
            "human": lambda: ctx.step.wait_for_event("approved"),
            "robot": lambda: ctx.step.run_workflow(child_waits, name="check"),
        },
    )
    after = await ctx.step.wait_for_event("go")
    return {"winner": winner, "value": value, "after": after}


async def test_race__the_winner_is_journaled_and_kept_on_replay() -> None:
    runs = MemoryRuns([approve, child_waits])
    run_id = runs.start(approve)
    await runs.run_until_idle()
    [child] = [r for r in runs.runs.values() if r.parent_run_id == run_id]
    assert runs.signal(run_id, "approved", {"by": "ann"})
    await runs.run_until_idle()
    # the losing branch's child run is canceled, and says why
    assert child.status == RunStatus.CANCELED
    assert child.error == {
        "type": "WorkflowCanceled",
        "message": f"run {child.run_id} was canceled: its branch lost a race",
    }
    decided = runs.run(run_id).journal["decide"]
    assert decided.output == {"winner": "human", "value": {"by": "ann"}}
    runs.signal(run_id, "go", {"n": 1})
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert (run.status, run.output) == (
        RunStatus.COMPLETED,
        {"winner": "human", "value": {"by": "ann"}, "after": {"n": 1}},
    )


async def instant(value: str) -> str:
    return value


@workflow(name="tie")
async def tie(ctx: WorkflowContext) -> object:
    return await ctx.step.race("pick", {"b": lambda: instant("b"), "a": lambda: instant("a")})


async def test_race__of_branches_done_together_the_first_declared_wins() -> None:
    runs = MemoryRuns([tie])
    run_id = runs.start(tie)
    await runs.run_until_idle()
    assert runs.run(run_id).output == ["b", "b"]


async def branch(ctx: WorkflowContext, name: str, fail: bool) -> str:
    await ctx.step.sleep(f"{name}-nap", 10)

    def body() -> str:
        calls[name] += 1
        if fail:
            raise NonRetriableError(f"{name} broke")
        return name.upper()

    result: str = await ctx.step.run("work", body)
    return result


@workflow(name="fetch")
async def fetch(ctx: WorkflowContext, failing: list[str]) -> Any:
    try:
        return await ctx.step.join(
            "all",
            {
                "user": lambda: branch(ctx, "user", "user" in failing),
                "posts": lambda: branch(ctx, "posts", "posts" in failing),
            },
        )
    except JoinError as exc:
        return {"failed": sorted(exc.failures), "types": [f["type"] for f in exc.failures.values()]}


async def test_join__results_of_every_branch_survive_suspension() -> None:
    runs = MemoryRuns([fetch])
    run_id = runs.start(fetch, [])
    executions = await runs.run_until_idle()
    run = runs.run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"user": "USER", "posts": "POSTS"})
    assert executions >= 2  # the naps suspended the run: the join resumed from its journal
    assert calls == {"user": 1, "posts": 1}
    assert run.journal["all/user/work"].output == "USER"


async def test_join__a_failed_branch_lets_the_others_finish_then_raises_join_error() -> None:
    runs = MemoryRuns([fetch])
    run_id = runs.start(fetch, ["posts"])
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert run.output == {"failed": ["posts"], "types": ["NonRetriableError"]}
    assert calls == {"user": 1, "posts": 1}
    assert run.journal["all/user/work"].status == StepStatus.COMPLETED


async def drain_body(ctx: WorkflowContext, state: dict[str, int]) -> Continue | Break:
    page = state["page"]
    await ctx.step.run("fetch", counted, f"page-{page}")
    await ctx.step.sleep("pause", 60)
    if page == 4:
        return Break({"pages": page + 1})
    if page == 1:
        return Continue({"page": 3})  # state decides the next iteration, not the counter
    return Continue({"page": page + 1})


@workflow(name="drain")
async def drain(ctx: WorkflowContext) -> Any:
    return await ctx.step.loop("pages", drain_body, {"page": 0}, keep=2)


async def test_loop__state_is_journaled_per_iteration_and_old_iterations_are_trimmed() -> None:
    runs = MemoryRuns([drain])
    run_id = runs.start(drain)
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, {"pages": 5})
    # each iteration fetched once, though every pause suspended and replayed the run
    assert calls == {"page-0": 1, "page-1": 1, "page-3": 1, "page-4": 1}
    kept = sorted({e.key.split("/")[1] for e in run.entries if e.key.startswith("pages/")})
    assert kept == ["~1", "~2", "~3"]  # keep=2 iterations before the last one
    assert run.journal["pages"].output == {"i": 3, "value": {"pages": 5}}


# -- retries -------------------------------------------------------------------------------------


def flaky(failures: int, exc: Exception) -> str:
    calls["flaky"] += 1
    if calls["flaky"] <= failures:
        raise exc
    return "ok"


def retried(policy: RetryPolicy, failures: int, exc: Exception) -> WorkflowDefinition[Any, Any]:
    @workflow(name="retried")
    async def definition(ctx: WorkflowContext) -> str:
        try:
            out: str = await ctx.step.run("call", flaky, failures, exc, retry=policy)
        except Exception as caught:
            return f"gave up: {type(caught).__name__}"
        return out

    return definition


async def backoffs(runs: MemoryRuns, run_id: str) -> list[float]:
    """Run to the end, noting each scheduled retry's delay from the failed attempt."""
    delays: list[float] = []
    while True:
        before = runs.now
        await runs.execute(run_id)
        run = runs.run(run_id)
        if run.status != RunStatus.SLEEPING:
            return delays
        entry = run.journal["call"]
        assert entry.status == StepStatus.RETRYING
        assert entry.due_at is not None
        delays.append((entry.due_at - before).total_seconds())
        runs.now = run.available_at


async def test_retry__attempts_back_off_by_the_policy_then_succeed() -> None:
    policy = RetryPolicy(max_attempts=4, initial_interval=10, backoff_coefficient=3, jitter=0)
    runs = MemoryRuns([definition := retried(policy, 2, ValueError("down"))])
    run_id = runs.start(definition)
    delays = await backoffs(runs, run_id)
    assert [round(d) for d in delays] == [10, 30]
    run = runs.run(run_id)
    assert (run.status, run.output) == (RunStatus.COMPLETED, "ok")
    assert run.journal["call"].attempts == 3
    assert calls["flaky"] == 3


async def test_retry__the_attempt_budget_ends_in_the_step_error() -> None:
    policy = RetryPolicy(max_attempts=2, initial_interval=5, jitter=0)
    runs = MemoryRuns([definition := retried(policy, 9, ValueError("down"))])
    run_id = runs.start(definition)
    assert [round(d) for d in await backoffs(runs, run_id)] == [5]
    run = runs.run(run_id)
    assert run.output == "gave up: ValueError"
    assert calls["flaky"] == 2
    entry = run.journal["call"]
    assert (entry.status, entry.attempts) == (StepStatus.FAILED, 2)
    assert entry.error is not None
    assert entry.error["message"] == "down"


@pytest.mark.parametrize(
    ("policy", "exc", "caught"),
    [
        (RetryPolicy(jitter=0), NonRetriableError("card stolen"), "NonRetriableError"),
        (RetryPolicy(jitter=0, non_retryable=[KeyError]), KeyError("sku"), "KeyError"),
    ],
)
async def test_retry__non_retriable_errors_fail_the_step_at_once(
    policy: RetryPolicy, exc: Exception, caught: str
) -> None:
    runs = MemoryRuns([definition := retried(policy, 9, exc)])
    run_id = runs.start(definition)
    assert await backoffs(runs, run_id) == []
    assert runs.run(run_id).output == f"gave up: {caught}"
    assert calls["flaky"] == 1


async def test_retry__retry_after_error_sets_the_delay_instead_of_the_backoff() -> None:
    policy = RetryPolicy(initial_interval=1, jitter=0)
    exc = RetryAfterError("rate limited", timedelta(minutes=5))
    runs = MemoryRuns([definition := retried(policy, 1, exc)])
    run_id = runs.start(definition)
    assert [round(d) for d in await backoffs(runs, run_id)] == [300]
    assert runs.run(run_id).output == "ok"


# -- compensation --------------------------------------------------------------------------------


def book(item: str) -> str:
    log.append(f"book {item}")
    return f"{item}-booking"


def unbook(booking: str) -> None:
    log.append(f"cancel {booking}")


def decline() -> None:
    raise RollbackError("card declined")


@workflow(name="trip")
async def trip(ctx: WorkflowContext, fail_with: str) -> None:
    await ctx.step.run("hotel", book, "hotel", compensate=unbook)
    await ctx.step.sleep("hold", 600)  # suspends: the hotel step is replayed after it
    await ctx.step.run("car", book, "car", compensate=unbook)
    await ctx.step.run("insurance", book, "insurance")  # nothing to compensate
    if fail_with == "rollback":
        await ctx.step.run("pay", decline)
    raise ValueError("bug in the workflow")


@pytest.mark.parametrize("fail_with", ["rollback", "error"])
async def test_compensation__runs_in_reverse_order_with_recorded_results(fail_with: str) -> None:
    runs = MemoryRuns([trip])
    run_id = runs.start(trip, fail_with)
    await runs.run_until_idle()
    run = runs.run(run_id)
    assert run.status == RunStatus.FAILED
    assert log == [
        "book hotel",
        "book car",
        "book insurance",
        "cancel car-booking",
        "cancel hotel-booking",  # registered on replay, with the recorded result
    ]
    assert [e.key for e in run.entries][-2:] == ["compensate:car", "compensate:hotel"]


async def test_compensation__a_retried_run_does_not_compensate_before_its_last_attempt() -> None:
    @workflow(name="trip", retry=RetryPolicy(max_attempts=2, jitter=0))
    async def retried_trip(ctx: WorkflowContext, fail_with: str) -> None:
        await trip.fn(ctx, fail_with)

    runs = MemoryRuns([retried_trip])
    run_id = runs.start(retried_trip, "error")
    run = runs.run(run_id)
    while run.attempt == 1:
        await runs.execute(run_id)
        runs.now = max(runs.now, run.available_at)
    assert run.status == RunStatus.PENDING  # the first attempt failed: a retry is due
    assert not [line for line in log if line.startswith("cancel")]
    await runs.run_until_idle()
    assert (run.status, run.attempt) == (RunStatus.FAILED, 2)
    # the first attempt's recorded steps are kept; compensations ran once, at the end
    assert log.count("book hotel") == 1
    assert log[-2:] == ["cancel car-booking", "cancel hotel-booking"]
    assert run.error is not None
    assert run.error["type"] == "ValueError"
