"""`/v1/approvals`: pending approvals, and deciding one by its token (Slack-style
integrations; the page people open is `/approve/{token}`, in `ripple.platform.ui`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final

from fastapi import APIRouter, Path, Query
from pydantic import Field

from ripple.platform.api.deps import ClientDep
from ripple.platform.api.models import ApiModel, OutModel
from ripple.platform.api.problems import problem_responses

__all__ = ["ApprovalOut", "DecideApproval", "DecisionOut", "router"]

router = APIRouter(tags=["approvals"])

#: What `sign_token` makes: two base64url parts joined by a dot (ASCII, so a token of the
#: longest length stays well inside the request-target limit).
TOKEN_PATTERN: Final = r"^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$"
TokenPath = Annotated[str, Path(min_length=1, max_length=1024, pattern=TOKEN_PATTERN)]


class DecideApproval(ApiModel):
    """A decision: approve or reject, by whom, with an optional comment."""

    approved: bool
    by: str | None = Field(default=None, max_length=200)
    comment: str | None = Field(default=None, max_length=2000)


class DecisionOut(OutModel):
    run_id: str
    step: str
    approved: bool
    by: str | None = None
    comment: str | None = None
    at: datetime


class ApprovalOut(OutModel):
    run_id: str
    step: str
    workflow: str
    url: str
    state: str = Field(description="pending, approved, rejected or expired")
    expires_at: datetime | None = None
    details: Any = None
    approvers: list[str] | None = None
    created_at: datetime
    decided_at: datetime | None = None
    by: str | None = None
    comment: str | None = None


def approval_out(item: Any) -> ApprovalOut:
    return ApprovalOut(
        run_id=item.run_id,
        step=item.step,
        workflow=item.workflow,
        url=item.url,
        state=item.state,
        expires_at=item.expires_at,
        details=item.details,
        approvers=item.approvers,
        created_at=item.created_at,
        decided_at=item.decided_at,
        by=item.by,
        comment=item.comment,
    )


@router.get("/approvals", response_model=list[ApprovalOut], responses=problem_responses(422))
async def list_approvals(
    client: ClientDep,
    pending: Annotated[bool, Query(description="Only undecided, unexpired ones.")] = True,
    run_id: Annotated[str | None, Query(alias="runId", max_length=64)] = None,
) -> list[ApprovalOut]:
    """Approvals oldest first, with their links."""
    items = await client.approvals.list(pending, run_id=run_id)
    return [approval_out(item) for item in items]


@router.post(
    "/approvals/{token}",
    response_model=DecisionOut,
    responses=problem_responses(404, 409, 410, 422),
)
async def decide_approval(token: TokenPath, body: DecideApproval, client: ClientDep) -> DecisionOut:
    """Approve or reject: 200 once; 409 when decided already, 410 when expired (or its run
    ended), 404 for a forged or altered token."""
    decision = await client.approvals.decide(
        token, approved=body.approved, by=body.by, comment=body.comment
    )
    item = await client.approvals.get(token)
    return DecisionOut(
        run_id=item.run_id,
        step=item.step,
        approved=decision.approved,
        by=decision.by,
        comment=decision.comment,
        at=decision.at,
    )
