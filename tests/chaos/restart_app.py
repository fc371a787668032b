"""The workflow of the Postgres-restart test: three ledger steps (effect rows written outside
the journal, `tests.e2e.resilience.app.ledger_step`), each followed by a durable 0.2 s sleep."""

from __future__ import annotations

from ripple.workflows import WorkflowContext, workflow
from tests.e2e.resilience.app import ledger_step


@workflow(name="paced")
async def paced(ctx: WorkflowContext) -> list[int]:
    """`a`, sleep, `b`, sleep, `c`, sleep; returns the pids that ran the steps."""
    pids = []
    for step in ("a", "b", "c"):
        done = await ctx.step.run(step, ledger_step, ctx.run_id, step, 5)
        pids.append(int(done["pid"]))
        await ctx.step.sleep(f"after-{step}", 0.2)
    return pids


@workflow(name="signaled")
async def signaled(ctx: WorkflowContext) -> dict[str, object]:
    """`a`, then wait for the signal `go`, then `b`; returns the signal's payload."""
    await ctx.step.run("a", ledger_step, ctx.run_id, "a", 5)
    payload = await ctx.step.wait_for_event("go")
    await ctx.step.run("b", ledger_step, ctx.run_id, "b", 5)
    return payload or {}
