"""Suspects: a run whose worker was lost is claimed alone, by a worker with nothing else in
flight, until it records a step (a lost worker is simulated by a run left `running` under a
dead owner with its lease expired, the way a killed worker leaves it)."""

from __future__ import annotations

import asyncio

from ripple.workflows import WorkflowContext, workflow
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App

seen: list[str] = []
gates: dict[str, asyncio.Event] = {}
entered: dict[str, asyncio.Event] = {}


def reset() -> None:
    seen.clear()
    gates.clear()
    entered.clear()
    for name in ("first", "second"):
        gates[name] = asyncio.Event()
        entered[name] = asyncio.Event()


async def gated(run_id: str, name: str) -> str:
    seen.append(f"{run_id}:{name}")
    entered[name].set()
    await gates[name].wait()
    return name


@workflow(name="gated-pair")
async def gated_pair(ctx: WorkflowContext) -> list[str]:
    first = await ctx.step.run("first", gated, ctx.run_id, "first")
    second = await ctx.step.run("second", gated, ctx.run_id, "second")
    return [first, second]


async def note(run_id: str) -> str:
    seen.append(run_id)
    return run_id


@workflow(name="single")
async def single(ctx: WorkflowContext) -> str:
    return str(await ctx.step.run("note", note, ctx.run_id))


async def lose_worker(app: App, run_id: str, *, lapsed: bool = True) -> None:
    """The run's worker died mid-run: `running` under a dead owner, the lease lapsed (or, with
    `lapsed=False`, about to: `lapse` ends it)."""
    await app.pool.execute(
        "UPDATE ripple_runs SET status = 'running', started_at = now(), attempt = 1, "
        "lease_owner = 'dead', epoch = 3, available_at = CASE WHEN $2 "
        "THEN now() - interval '1 second' ELSE 'infinity' END WHERE run_id = $1",
        run_id,
        lapsed,
    )


async def lapse(app: App, run_id: str) -> None:
    await app.pool.execute(
        "UPDATE ripple_runs SET available_at = now() - interval '1 second' WHERE run_id = $1",
        run_id,
    )


async def row(app: App, run_id: str) -> dict[str, object]:
    found = await app.pool.fetchrow(
        "SELECT status, lease_owner, suspect, recoveries FROM ripple_runs WHERE run_id = $1",
        run_id,
    )
    assert found is not None
    return dict(found)


async def test_suspect__runs_alone_until_it_records_a_step(app: App) -> None:
    reset()
    suspect = await app.workflows.start(gated_pair)
    await lose_worker(app, suspect.run_id)
    other = await app.workflows.start(single)
    async with app.worker(gated_pair, single):
        await asyncio.wait_for(entered["first"].wait(), 10)
        # The suspect's first step runs; the other due run was not claimed beside it.
        assert (await row(app, suspect.run_id))["suspect"] is True
        assert (await row(app, other.run_id))["status"] == "pending"
        gates["first"].set()
        # Its first step recorded, it is cleared, and the worker claims the other run at once.
        assert await other.result(timeout=10) == other.run_id
        await asyncio.wait_for(entered["second"].wait(), 10)
        assert (await row(app, suspect.run_id))["suspect"] is False
        gates["second"].set()
        assert await suspect.result(timeout=10) == ["first", "second"]
    # Its worker was lost beside nothing it was isolated from: no recovery is charged.
    assert (await row(app, suspect.run_id))["recoveries"] == 0
    assert seen[0] == f"{suspect.run_id}:first"


async def test_suspect__a_busy_worker_stops_claiming_until_it_can_take_a_waiting_suspect(
    app: App,
) -> None:
    reset()
    suspect = await app.workflows.start(single)
    await lose_worker(app, suspect.run_id, lapsed=False)
    busy = await app.workflows.start(gated_pair)
    worker = app.worker(gated_pair, single)
    async with worker:
        await asyncio.wait_for(entered["first"].wait(), 10)
        fresh = await app.workflows.start(single)
        assert await fresh.result(timeout=10) == fresh.run_id  # claimed beside the busy run
        await lapse(app, suspect.run_id)
        # A claim passed over the suspect: the worker claims nothing until it is empty.
        await assert_eventually(lambda: worker._suspect_waiting, timeout=10)
        assert (await row(app, suspect.run_id))["lease_owner"] == "dead"
        later = await app.workflows.start(single)
        gates["first"].set()
        gates["second"].set()
        assert await busy.result(timeout=10) == ["first", "second"]
        assert await suspect.result(timeout=10) == suspect.run_id
        assert await later.result(timeout=10) == later.run_id
    # The worker emptied itself and took the suspect before the run started after it.
    assert seen.index(suspect.run_id) < seen.index(later.run_id)
    assert seen.index(f"{busy.run_id}:second") < seen.index(suspect.run_id)
