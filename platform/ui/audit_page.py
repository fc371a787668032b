"""The dashboard's audit page (`/ui/audit`): the audit trail newest first, filtered by action."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from ripple.platform.access.audit import ACTIONS
from ripple.platform.access.scopes import Need
from ripple.platform.api.problems import ProblemError
from ripple.platform.ui.routes import PAGE_SIZE, PREFIX, ClientDep, Session, render

__all__ = ["router"]

router = APIRouter(prefix=PREFIX, include_in_schema=False)


@router.get("/audit")
async def audit(
    request: Request,
    nonce: Session,
    client: ClientDep,
    action: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
) -> Response:
    principal = request.state.ui_principal  # set by the session check (`nonce`)
    if not principal.permits(Need("admin")):
        raise ProblemError(403, "the audit trail needs a token with the scope 'admin'")
    action = action or None  # the form's "all actions" sends an empty value
    page = await client.audit.list(action=action, limit=PAGE_SIZE, cursor=cursor)
    next_url = None
    if page.next_cursor:
        query = {"cursor": page.next_cursor} | ({"action": action} if action else {})
        next_url = "?" + urlencode(query)
    return render(
        request,
        nonce,
        "audit.html",
        items=page.items,
        actions=ACTIONS,
        action=action,
        next_url=next_url,
    )
