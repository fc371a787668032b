"""Operations routes: `/healthz` (process), `/readyz` (database and schema), `/metrics`."""

from __future__ import annotations

import asyncio
from typing import Any, Final

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import Field

from ripple.platform.api.deps import ClientDep, require_token
from ripple.platform.api.models import OutModel
from ripple.platform.core import migrate
from ripple.platform.errors import RippleError
from ripple.platform.ops.observability import metrics_exposition

__all__ = ["router"]

router = APIRouter(tags=["operations"])

#: Longest `/readyz` waits for the database (or RIPPLE_DB_TIMEOUT if shorter) before it answers
#: 503: a load balancer must learn of a stalled database quickly, not when it recovers.
READY_WAIT: Final = 1.0


class Health(OutModel):
    status: str = Field(examples=["ok"])


class Readiness(OutModel):
    status: str = Field(examples=["ready"])
    database: bool
    pending_migrations: int | None = None
    detail: str | None = None


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """The process is up (no dependency is checked)."""
    return Health(status="ok")


def _probe(request: Request, client: ClientDep) -> asyncio.Task[int]:
    """The database probe in flight, shared by concurrent `/readyz` calls (a stalled database
    gets one probe, not one per call), or a new one."""
    task: asyncio.Task[int] | None = getattr(request.app.state, "ready_probe", None)
    if task is None or task.done():
        task = asyncio.create_task(migrate.pending_migrations(client.pool))
        # Retrieve the outcome even when every caller gave up waiting for it.
        task.add_done_callback(lambda t: t.cancelled() or t.exception())
        request.app.state.ready_probe = task
    return task


def _unavailable(detail: str) -> JSONResponse:
    body = Readiness(status="unavailable", database=False, detail=detail)
    return JSONResponse(body.model_dump(by_alias=True), status_code=503)


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(request: Request, client: ClientDep) -> Any:
    """Ready when the database answers (within a second) and every migration this version
    ships is applied."""
    probe = _probe(request, client)
    wait = min(READY_WAIT, client.settings.db_timeout)
    done, _ = await asyncio.wait({probe}, timeout=wait)
    if not done:
        return _unavailable(f"the database did not answer within {wait:g} s")
    try:
        pending = probe.result()
    except RippleError as exc:
        return _unavailable(exc.message)
    if pending:
        body = Readiness(
            status="migrations pending",
            database=True,
            pending_migrations=pending,
            detail="run `ripple migrate`",
        )
        return JSONResponse(body.model_dump(by_alias=True), status_code=503)
    return Readiness(status="ready", database=True, pending_migrations=0)


@router.get(
    "/metrics",
    dependencies=[Depends(require_token)],
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}},
)
async def metrics(client: ClientDep) -> Response:
    """Prometheus metrics of this process (bearer token required when tokens are configured).

    Gauges computed from Postgres (queue depth, stranded runs, failing endpoints) are refreshed
    first (concurrent scrapes share one refresh).
    """
    body = await metrics_exposition(client.gauges)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
