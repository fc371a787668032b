"""Code B: code A with two steps reordered, in the same version (breaks in-flight runs)."""

from __future__ import annotations

from ripple.workflows import WorkflowContext, workflow
from tests.e2e.verify_apps.effects import charge, reserve


@workflow(name="ship", version=1)
async def ship(ctx: WorkflowContext) -> str:
    await ctx.step.run("charge", charge)
    await ctx.step.run("reserve", reserve)
    await ctx.step.wait_for_event("approve")
    return "shipped"
