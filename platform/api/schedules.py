"""Routes for schedules: create (or replace), list, get, pause, resume, trigger, delete."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, Path, Response
from pydantic import ConfigDict, Field

from ripple.platform.api.deps import ClientDep
from ripple.platform.api.models import JSON_NUMBER, ApiModel, ScheduleOut, schedule_out
from ripple.platform.api.problems import ProblemError, problem_responses
from ripple.platform.api.results import Triggered
from ripple.platform.api.topics import TOPIC_PATTERN
from ripple.platform.events.topics import MAX_NAME_LENGTH
from ripple.platform.schedules.schedules import SCHEDULE_NAME
from ripple.workflows.authoring.definition import NAME_RE
from ripple.workflows.authoring.schedule import MIN_EVERY_SECONDS

__all__ = ["router"]

router = APIRouter(tags=["schedules"])

ScheduleName = Annotated[
    str, Path(pattern=f"^{SCHEDULE_NAME.pattern}$", description="Schedule name")
]
#: Longest `every` accepted (ten years, in seconds).
MAX_EVERY_SECONDS: Final = 10 * 365 * 86_400


def _one_present(*fields: tuple[str, str]) -> dict[str, Any]:
    """JSON Schema: exactly one of these (field, JSON type) pairs is present and not null."""
    return {
        "oneOf": [
            {"required": [name], "properties": {name: {"type": kind}}} for name, kind in fields
        ]
    }


class ScheduleIn(ApiModel):
    """A schedule starts `workflow` or publishes to `topic`, on `cron` or `every` seconds."""

    model_config = ConfigDict(
        json_schema_extra={
            "allOf": [
                _one_present(("workflow", "string"), ("topic", "string")),
                _one_present(("cron", "string"), ("every", "number")),
                {
                    "not": {
                        "required": ["input", "payload"],
                        "properties": {
                            "input": {"not": {"type": "null"}},
                            "payload": {"not": {"type": "null"}},
                        },
                    }
                },
            ]
        }
    )

    name: str = Field(pattern=f"^{SCHEDULE_NAME.pattern}$", examples=["nightly-report"])
    workflow: str | None = Field(default=None, pattern=NAME_RE.pattern, examples=["report"])
    topic: str | None = Field(
        default=None, max_length=MAX_NAME_LENGTH, pattern=TOPIC_PATTERN, examples=["clock.tick"]
    )
    cron: str | None = Field(
        default=None, description="A 5-field cron expression.", examples=["0 3 * * *"]
    )
    every: (
        Annotated[float, Field(ge=MIN_EVERY_SECONDS, le=MAX_EVERY_SECONDS), JSON_NUMBER] | None
    ) = Field(
        default=None,
        description="Seconds between ticks (at least a millisecond, at most ten years).",
        examples=[30],
    )
    timezone: str = Field(
        default="UTC", description="An IANA zone name.", examples=["Europe/Berlin"]
    )
    input: Any = Field(default=None, description="Each run's input, or each event's payload.")
    payload: Any = Field(default=None, description="Alias of `input` for topic schedules.")
    overlap: Literal["skip", "allow"] = "skip"


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
