"""A poison step (it kills its worker process on every attempt) beside innocent runs on the same
worker, under a supervisor that restarts the worker after each death: the crash budget must land
on the run that causes the crashes, and the others must finish.

The runs are started before the worker, so its first claim takes all of them together and the
first death hits every one. From then on each of them is a suspect, claimed alone until it
records a step (docs/workflows.md, "Crash budget, apart from retries")."""

from __future__ import annotations

import pytest

from ripple.platform.client import Client
from ripple.workflows import WorkflowFailed
from tests.chaos.conftest import Profile
from tests.chaos.figures import record
from tests.e2e.resilience import app
from tests.e2e.resilience.conftest import Effects
from tests.e2e.resilience.procs import Workers

#: The poison's crash budget (RIPPLE_MAX_RECOVERIES of the worker processes).
MAX_RECOVERIES = 3
#: Deaths until the poison fails: the first one, shared with the innocents, is charged to no
#: run; then each death of the poison running alone is charged, and the claim after the
#: budget's last one fails it without executing anything.
DEATHS = 1 + MAX_RECOVERIES + 1
STEPS = ("a", "b", "c")


async def test_poison_step_beside_innocent_runs__only_the_poison_spends_a_crash_budget(
    chaos_client: Client, chaos_effects: Effects, chaos_workers: Workers, profile: Profile
) -> None:
    """Every innocent run completes with each of its steps executed at most twice (once
    before the first death, once after it); the poison fails with `WorkerLost` once its own
    budget is spent, charged nothing for the death it shared."""
    innocent = [await chaos_client.start(app.ledger, [200, 200, 200]) for _ in range(profile.runs)]
    poison = await chaos_client.start(app.poison)
    supervisor = await chaos_workers.start(
        concurrency=profile.runs + 10,  # its first claim takes every run
        restarts=DEATHS + 3,
        RIPPLE_MAX_RECOVERIES=str(MAX_RECOVERIES),
    )
    with pytest.raises(WorkflowFailed) as failed:
        await poison.result(timeout=120)
    assert failed.value.error["type"] == "WorkerLost"
    assert "'poison'" in failed.value.error["message"]
    for handle in innocent:
        await handle.result(timeout=120)

    executions = []
    for handle in innocent:
        counts = await chaos_effects.counts(handle.run_id)
        executions += [counts.get(f"{step}.start", 0) for step in STEPS]
        assert counts.get("a.start", 0) >= 1
        assert all(counts.get(f"{step}.end", 0) >= 1 for step in STEPS), counts
    assert max(executions) <= 2, executions
    budgets = {
        row["run_id"]: row["recoveries"]
        for row in await chaos_client.pool.fetch(
            "SELECT run_id, recoveries FROM ripple_runs WHERE run_id = ANY($1::text[])",
            [h.run_id for h in [*innocent, poison]],
        )
    }
    assert budgets.pop(poison.run_id) == MAX_RECOVERIES + 1
    assert set(budgets.values()) == {0}  # no innocent was charged a recovery
    poison_runs = await chaos_effects.counts(poison.run_id)
    assert poison_runs["poison.started"] == DEATHS
    deaths = [line for line in supervisor.stdout if line.startswith("exited")]
    assert deaths == ["exited -9"] * DEATHS
    record(
        "poison-isolation",
        lost=0,  # every innocent completed (asserted)
        innocents=len(innocent),
        innocents_completed=len(innocent),
        max_innocent_step_executions=max(executions),
        innocent_steps_reexecuted=sum(n - 1 for n in executions if n > 1),
        poison_recoveries=MAX_RECOVERIES + 1,
        worker_deaths=len(deaths),
    )
