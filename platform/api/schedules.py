"""Routes for schedules: create (or replace), list, get, pause, resume, trigger, delete."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Response
from pydantic import Field

from ripple.platform.api.deps import ClientDep
from ripple.platform.api.models import ApiModel, OutModel, ScheduleOut, schedule_out
from ripple.platform.api.problems import ProblemError, problem_responses

__all__ = ["router"]

router = APIRouter(tags=["schedules"])

ScheduleName = Annotated[
    str, Path(pattern=r"^[A-Za-z0-9_.:-]{1,128}$", description="Schedule name")
]


class ScheduleIn(ApiModel):
    """A schedule starts `workflow` or publishes to `topic`, on `cron` or `every` seconds."""

    name: str = Field(min_length=1, max_length=128, examples=["nightly-report"])
    workflow: str | None = Field(default=None, examples=["report"])
    topic: str | None = Field(default=None, examples=["clock.tick"])
    cron: str | None = Field(default=None, examples=["0 3 * * *"])
    every: float | None = Field(default=None, description="Seconds between ticks.", examples=[30])
    timezone: str = Field(default="UTC", examples=["Europe/Berlin"])
    input: Any = Field(default=None, description="Each run's input, or each event's payload.")
    payload: Any = Field(default=None, description="Alias of `input` for topic schedules.")
    overlap: Literal["skip", "allow"] = "skip"


class Triggered(OutModel):
    run_id: str | None = None


@router.post(
    "/schedules", status_code=201, response_model=ScheduleOut, responses=problem_responses(422)
)
async def create_schedule(body: ScheduleIn, client: ClientDep) -> ScheduleOut:
    """Create a schedule, or replace the one with this name (a paused one stays paused)."""
    info = await client.schedules.create(
        body.name,
        workflow=body.workflow,
        topic=body.topic,
        cron=body.cron,
        every=body.every,
        timezone=body.timezone,
        input=body.input,
        payload=body.payload,
        overlap=body.overlap,
    )
    return schedule_out(info)


@router.get("/schedules", response_model=list[ScheduleOut])
async def list_schedules(client: ClientDep) -> list[ScheduleOut]:
    """Every schedule, by name, with its next tick."""
    return [schedule_out(info) for info in await client.schedules.list()]


@router.get("/schedules/{name}", response_model=ScheduleOut, responses=problem_responses(404, 422))
async def get_schedule(name: ScheduleName, client: ClientDep) -> ScheduleOut:
    """One schedule."""
    info = await client.schedules.get(name)
    if info is None:
        raise ProblemError(404, f"no schedule {name}")
    return schedule_out(info)


@router.post(
    "/schedules/{name}/pause", response_model=ScheduleOut, responses=problem_responses(404, 422)
)
async def pause_schedule(name: ScheduleName, client: ClientDep) -> ScheduleOut:
    """Stop firing until resumed."""
    return schedule_out(await client.schedules.pause(name))


@router.post(
    "/schedules/{name}/resume", response_model=ScheduleOut, responses=problem_responses(404, 422)
)
async def resume_schedule(name: ScheduleName, client: ClientDep) -> ScheduleOut:
    """Fire again from the next tick on (ticks missed while paused do not fire)."""
    return schedule_out(await client.schedules.resume(name))


@router.post(
    "/schedules/{name}/trigger", response_model=Triggered, responses=problem_responses(404, 422)
)
async def trigger_schedule(name: ScheduleName, client: ClientDep) -> Triggered:
    """Fire once now, outside the cadence; `runId` for a workflow schedule."""
    return Triggered(run_id=await client.schedules.trigger(name))


@router.delete("/schedules/{name}", status_code=204, responses=problem_responses(404, 422))
async def delete_schedule(name: ScheduleName, client: ClientDep) -> Response:
    """Delete a schedule (one declared in code returns when a worker serving it starts)."""
    if not await client.schedules.delete(name):
        raise ProblemError(404, f"no schedule {name}")
    return Response(status_code=204)
