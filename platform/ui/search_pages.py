"""Dashboard pages of search and approvals: the events page (`/ui/events`, search by topic,
window and payload), pending approvals (`/ui/approvals`), and the approval page a link opens
(`/approve/{token}`), which needs no login: holding the signed link is the permission."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Final
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, Response

from ripple.platform.api.deps import get_client
from ripple.platform.api.models import MAX_WHERE_LENGTH
from ripple.platform.errors import Conflict, Gone, InvalidInput, NotFound, RippleError
from ripple.platform.ui.routes import PAGE_SIZE, PREFIX, ClientDep, Session, _env, render

__all__ = ["mount_search_pages"]

_WINDOWS: Final = {
    "1h": timedelta(hours=1),
    "24h": timedelta(days=1),
    "7d": timedelta(days=7),
    "31d": timedelta(days=31),
}

router = APIRouter(prefix=PREFIX, include_in_schema=False)
public = APIRouter(include_in_schema=False)


@router.get("/events")
async def events_page(
    request: Request,
    nonce: Session,
    client: ClientDep,
    topic: Annotated[str | None, Query(max_length=255)] = None,
    where: Annotated[str | None, Query(max_length=MAX_WHERE_LENGTH)] = None,
    window: Annotated[str | None, Query(max_length=8)] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> Response:
    span = _WINDOWS.get(window or "1h", _WINDOWS["1h"])
    until = datetime.now(UTC) + timedelta(seconds=1)
    error = None
    page = None
    try:
        contains = json.loads(where) if where else None
        page = await client.list_events(
            topic or None, until - span, until, contains, PAGE_SIZE, cursor or None
        )
    except ValueError as exc:  # bad JSON and InvalidInput alike
        error = f"Search refused: {exc}"
    filters = {"topic": topic or "", "where": where or "", "window": window or "1h"}
    next_url = None
    if page is not None and page.next_cursor:
        next_url = "?" + urlencode({**filters, "cursor": page.next_cursor})
    return render(
        request,
        nonce,
        "events.html",
        page=page,
        filters=filters,
        windows=list(_WINDOWS),
        error=error,
        next_url=next_url,
    )


@router.get("/approvals")
async def approvals_page(request: Request, nonce: Session, client: ClientDep) -> Response:
    pending = await client.approvals.list(limit=PAGE_SIZE * 2)
    return render(request, nonce, "approvals.html", pending=pending)


async def _approval_html(
    request: Request, token: str, *, message: str | None = None, status: int = 200
) -> HTMLResponse:
    client = await get_client(request)
    try:
        item = await client.approvals.get(token)
    except NotFound:
        item, status = None, 404
    html = _env.get_template("approve.html").render(item=item, message=message, token=token)
    return HTMLResponse(
        html,
        status_code=status,
        headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"},
    )


@public.get("/approve/{token}")
async def approve_page(request: Request, token: str) -> Response:
    """What is asked, with Approve / Reject and a comment box."""
    return await _approval_html(request, token)


@public.post("/approve/{token}")
async def approve_submit(request: Request, token: str) -> Response:
    form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
    decision = form.get("decision")
    if decision not in ("approve", "reject"):
        return await _approval_html(request, token, message="Choose Approve or Reject.", status=422)
    client = await get_client(request)
    try:
        await client.approvals.decide(
            token,
            approved=decision == "approve",
            by=(form.get("by") or "").strip() or None,
            comment=(form.get("comment") or "").strip() or None,
        )
    except NotFound:
        return await _approval_html(request, token, status=404)
    except Conflict as exc:
        return await _approval_html(request, token, message=exc.message, status=409)
    except Gone as exc:
        return await _approval_html(request, token, message=exc.message, status=410)
    except (InvalidInput, RippleError) as exc:
        return await _approval_html(request, token, message=exc.message, status=422)
    verdict = "Approved" if decision == "approve" else "Rejected"
    return await _approval_html(request, token, message=f"{verdict}. Thank you.")


def mount_search_pages(app: FastAPI) -> None:
    """Serve the events and approvals pages and the public approval page."""
    app.include_router(router)
    app.include_router(public)
