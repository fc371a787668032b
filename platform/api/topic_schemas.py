"""Routes for topic schemas: register, check, read, and the topic's compatibility mode.

Every route calls `client.topics` (the one path the CLI's direct mode takes too).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import Field

from ripple.platform.api.deps import ClientDep
from ripple.platform.api.models import ApiModel, OutModel
from ripple.platform.api.problems import ProblemError, problem_responses
from ripple.platform.api.topics import Topic
from ripple.platform.events.contracts.records import (
    Compatibility,
    CompatibilityReport,
    SchemaVersion,
)

__all__ = ["SchemaVersionOut", "router", "schema_version_out"]

router = APIRouter(tags=["topic schemas"])


class SchemaIn(ApiModel):
    schema_: dict[str, Any] = Field(
        alias="schema",
        description="A JSON Schema (draft 2020-12) for the topic's payloads.",
        examples=[{"type": "object", "properties": {"userId": {"type": "integer"}}}],
    )
    compatibility: Compatibility | None = Field(
        default=None, description="Set the topic's compatibility mode (default: keep it)."
    )


class CheckIn(ApiModel):
    schema_: dict[str, Any] = Field(alias="schema")


class CompatibilityIn(ApiModel):
    compatibility: Compatibility


class RegisteredOut(OutModel):
    topic: str
    version: int
    compatibility: Compatibility


class SchemaVersionOut(OutModel):
    topic: str
    version: int
    schema_: dict[str, Any] = Field(alias="schema")
    compatibility: Compatibility
    created_at: datetime


class ReportOut(OutModel):
    compatible: bool
    problems: list[str]


class CompatibilityOut(OutModel):
    topic: str
    compatibility: Compatibility


def schema_version_out(version: SchemaVersion) -> SchemaVersionOut:
    return SchemaVersionOut(
        topic=version.topic,
        version=version.version,
        schema=version.schema,
        compatibility=version.compatibility,
        created_at=version.created_at,
    )


def report_out(report: CompatibilityReport) -> ReportOut:
    return ReportOut(compatible=report.compatible, problems=report.problems)


@router.put(
    "/topics/{topic}/schema",
    status_code=201,
    response_model=RegisteredOut,
    responses={
        **problem_responses(409, 422),
        200: {"model": RegisteredOut, "description": "The same schema was registered already"},
    },
)
async def register_schema(topic: Topic, body: SchemaIn, client: ClientDep) -> Response:
    """Register the topic's next schema version: 201 new, 200 when the same schema exists;
    409 (`problems`) when it breaks the topic's compatibility rule."""
    version, created = await client.topics.register(topic, body.schema_, body.compatibility)
    out = RegisteredOut(
        topic=version.topic, version=version.version, compatibility=version.compatibility
    )
    return Response(out.model_dump_json(), 201 if created else 200, media_type="application/json")


@router.post(
    "/topics/{topic}/schema/check",
    response_model=ReportOut,
    responses=problem_responses(422),
)
async def check_schema(topic: Topic, body: CheckIn, client: ClientDep) -> ReportOut:
    """Whether the schema could be registered now, and why not; registers nothing."""
    return report_out(await client.topics.check_schema(topic, body.schema_))


@router.get(
    "/topics/{topic}/schema",
    response_model=SchemaVersionOut,
    responses=problem_responses(404, 422),
)
async def get_schema(
    topic: Topic,
    client: ClientDep,
    version: Annotated[
        int | None, Query(ge=1, le=2**31 - 1, description="Default: the latest")
    ] = None,
) -> SchemaVersionOut:
    """One schema version of the topic (the latest by default)."""
    found = await client.topics.get_schema(topic, version)
    if found is None:
        which = "any schema" if version is None else f"schema version {version}"
        raise ProblemError(404, f"topic {topic!r} has no {which}; register one with PUT")
    return schema_version_out(found)


@router.get(
    "/topics/{topic}/schemas",
    response_model=list[SchemaVersionOut],
    responses=problem_responses(422),
)
async def list_schemas(topic: Topic, client: ClientDep) -> list[SchemaVersionOut]:
    """Every schema version of the topic, oldest first."""
    return [schema_version_out(v) for v in await client.topics.list_schemas(topic)]


@router.put(
    "/topics/{topic}/compatibility",
    response_model=CompatibilityOut,
    responses=problem_responses(422),
)
async def set_compatibility(
    topic: Topic, body: CompatibilityIn, client: ClientDep
) -> CompatibilityOut:
    """Set the compatibility mode later registrations of the topic are judged by."""
    await client.topics.set_compatibility(topic, body.compatibility)
    return CompatibilityOut(topic=topic, compatibility=body.compatibility)
