"""Dashboard pages for deploying code: the versions in use (`/ui/versions`) and a run's
"Skip sleep" action (`POST /ui/runs/{run_id}/wake`). Registered by `routes.mount_ui`."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ripple.platform.ops.observability import LIVE_LEASES
from ripple.platform.ui.routes import _REFUSED, PREFIX, ClientDep, Form, Session, back, render

__all__ = ["router"]

router = APIRouter(prefix=PREFIX, include_in_schema=False)


@router.get("/versions")
async def versions(request: Request, nonce: Session, client: ClientDep) -> Response:
    live = client.settings.lease_seconds * LIVE_LEASES
    workflows = await client.deploys.versions(live_seconds=live)
    return render(
        request,
        nonce,
        "versions.html",
        workflows=workflows,
        stranded=[w.workflow for w in workflows if w.stranded],
        live_seconds=live,
        msg=request.query_params.get("msg"),
    )


@router.post("/runs/{run_id}/wake")
async def wake(run_id: str, form: Form, client: ClientDep) -> Response:
    try:
        woken = await client.wake(run_id)
    except _REFUSED as exc:
        return back(f"{PREFIX}/runs/{run_id}", f"Not woken: {exc.message}")
    text = "Timers fired: the run resumes now." if woken else "No pending sleep or timeout."
    return back(f"{PREFIX}/runs/{run_id}", text)
