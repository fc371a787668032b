"""`POST /v1/runs/{runId}/wake`: fire a parked run's pending sleeps and wait timeouts now."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Path
from pydantic import Field

from ripple.platform.api.deps import ClientDep
from ripple.platform.api.models import NO_NUL_PATTERN, ApiModel, OutModel
from ripple.platform.api.problems import problem_responses

__all__ = ["router"]

router = APIRouter(tags=["operations"])

RunIdPath = Annotated[str, Path(min_length=1, max_length=64, examples=["0193c2a4-..."])]


class WakeIn(ApiModel):
    step: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        pattern=NO_NUL_PATTERN,
        description="Only this step's timer (default: every pending sleep and wait timeout).",
        examples=["wait-3s"],
    )


class Woken(OutModel):
    run_id: str
    woken: bool = Field(description="True if a sleep or wait timeout fired.")


@router.post("/runs/{run_id}/wake", response_model=Woken, responses=problem_responses(404, 422))
async def wake_run(
    run_id: RunIdPath, client: ClientDep, body: Annotated[WakeIn | None, Body()] = None
) -> Woken:
    """Skip the wait: the run's pending sleeps complete now (journaled as fired early) and its
    wait timeouts expire now; the run resumes at once. Audited as `run.wake`."""
    step = body.step if body is not None else None
    return Woken(run_id=run_id, woken=await client.wake(run_id, step))
