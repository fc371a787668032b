"""Example app: a refund above a limit waits for a person to approve it from a link.

Run it with `ripple dev --app examples.approvals`, then:

    ripple runs list --where 'amount > 100'       # runs tagged with search attributes
    open http://127.0.0.1:8080/ui/approvals       # the pending approval and its link

The link opens a page with the refund's details and Approve / Reject.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from ripple.workflows import WorkflowContext, workflow

__all__ = ["refund"]

#: Refunds above this need a person's approval.
LIMIT = 100.0


@workflow(name="refund", attributes={"customer": str, "amount": float})
async def refund(ctx: WorkflowContext, inp: dict[str, Any]) -> dict[str, Any]:
    amount = float(inp["amount"])
    ctx.set_attributes(customer=str(inp["customer"]), amount=amount)
    if amount <= LIMIT:
        return {"refunded": True, "approvedBy": None}
    decision = await ctx.step.wait_for_approval(
        "refund-ok",
        timeout=timedelta(days=2),
        details={"customer": inp["customer"], "amount": amount, "reason": inp.get("reason")},
    )
    return {
        "refunded": decision.approved,
        "approvedBy": decision.by,
        "comment": decision.comment,
    }
