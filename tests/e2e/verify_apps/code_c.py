"""Code C: code A plus a step behind `ctx.patched` (safe for in-flight runs)."""

from __future__ import annotations

from ripple.workflows import WorkflowContext, workflow
from tests.e2e.verify_apps.effects import charge, fraud_check, reserve


@workflow(name="ship", version=1)
async def ship(ctx: WorkflowContext) -> str:
    await ctx.step.run("reserve", reserve)
    if ctx.patched("fraud-check"):
        await ctx.step.run("fraud-check", fraud_check)
    await ctx.step.run("charge", charge)
    await ctx.step.wait_for_event("approve")
    return "shipped"
