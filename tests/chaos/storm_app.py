"""The workflow of the signal storm: consumes signals `item` one wait at a time and records the
order it consumed them in, then waits once more (briefly) so a duplicate would be caught."""

from __future__ import annotations

from typing import Any

from ripple.workflows import WorkflowContext, workflow

#: Seconds the final wait gives a duplicate `item` to show up.
EXTRA_WAIT = 1.0


@workflow(name="inbox")
async def inbox(ctx: WorkflowContext, count: int) -> dict[str, Any]:
    """`count` waits for `item`, each journaled with its payload's `seq`, then one more wait
    that must time out: each signal consumed once, in the order the run received them."""
    order: list[int] = []
    for _ in range(count):
        payload = await ctx.step.wait_for_event("item")  # repeats get keys item, item#2, ...
        assert payload is not None
        order.append(int(payload["seq"]))
    extra = await ctx.step.wait_for_event("item", timeout=EXTRA_WAIT)
    return {"order": order, "extra": extra}
