"""Operations routes: `/healthz` (process), `/readyz` (database and schema), `/metrics`."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import Field

from ripple.platform import migrate
from ripple.platform.api.deps import ClientDep, require_token
from ripple.platform.api.models import OutModel
from ripple.platform.errors import RippleError
from ripple.platform.observability import metrics_exposition

__all__ = ["router"]

router = APIRouter(tags=["operations"])


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


@router.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
async def readyz(client: ClientDep) -> Any:
    """Ready when the database answers and every migration this version ships is applied."""
    try:
        pending = await migrate.pending_migrations(client.pool)
    except RippleError as exc:
        body = Readiness(status="unavailable", database=False, detail=exc.message)
        return JSONResponse(body.model_dump(by_alias=True), status_code=503)
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
