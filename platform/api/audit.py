"""Route for the audit trail: `GET /v1/audit`, newest first."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ripple.platform.access.audit import ACTIONS
from ripple.platform.api.audit_results import AuditPageOut, audit_page_out
from ripple.platform.api.deps import ClientDep
from ripple.platform.api.models import UUID_PATTERN, DateTimeIn
from ripple.platform.api.problems import problem_responses
from ripple.platform.api.results import check_page_size

__all__ = ["router"]

router = APIRouter(tags=["audit"])


@router.get("/audit", response_model=AuditPageOut, responses=problem_responses(422))
async def list_audit(
    client: ClientDep,
    since: Annotated[DateTimeIn | None, Query(description="Entries at or after this time.")] = None,
    action: Annotated[
        str | None,
        Query(
            max_length=64,
            description="Only this action (`run.cancel`, ...).",
            json_schema_extra={"enum": list(ACTIONS)},
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=10_000, description="Page size")] = 100,
    cursor: Annotated[
        str | None,
        Query(
            pattern=UUID_PATTERN,
            description="The `nextCursor` of the previous page.",
            json_schema_extra={"format": "uuid"},
        ),
    ] = None,
) -> AuditPageOut:
    """Audited operator and admin actions, newest first."""
    check_page_size(limit, client.settings.max_page_size)
    page = await client.audit.list(since=since, action=action, limit=limit, cursor=cursor)
    return audit_page_out(page)
