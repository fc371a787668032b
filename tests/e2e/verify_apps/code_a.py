"""Code A: reserve, charge, then wait for approval."""

from __future__ import annotations

from ripple.workflows import WorkflowContext, workflow
from tests.e2e.verify_apps.effects import charge, reserve


@workflow(name="ship", version=1)
async def ship(ctx: WorkflowContext) -> str:
    await ctx.step.run("reserve", reserve)
    await ctx.step.run("charge", charge)
    await ctx.step.wait_for_event("approve")
    return "shipped"
