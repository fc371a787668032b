"""Routes for topics: publish an event, and explain where an event would go."""

from __future__ import annotations

import json
import re
from typing import Annotated, Final

from fastapi import APIRouter, Path, Query, Response
from pydantic import Field

from ripple.platform.api.deps import ClientDep
from ripple.platform.api.hot_routes import HotRoute
from ripple.platform.api.models import (
    NO_NUL_PATTERN,
    ApiModel,
    JsonNotNull,
    Published,
)
from ripple.platform.api.problems import ProblemError, problem_responses
from ripple.platform.api.results import ExplanationOut, explanation_out, published
from ripple.platform.client import Client
from ripple.platform.events.topics import MAX_NAME_LENGTH

__all__ = ["HOT_ROUTES", "router"]

router = APIRouter(tags=["topics"])

#: What `validate_topic` and `validate_pattern` (ripple.platform.events.topics) accept, declared so
#: the OpenAPI says it (tests/unit/platform/test_api_patterns.py keeps them equal).
TOPIC_PATTERN: Final = r"^[a-z0-9_-]+(\.[a-z0-9_-]+)*$"
SUBSCRIPTION_PATTERN: Final = r"^([a-z0-9_-]+|\*|#)(\.([a-z0-9_-]+|\*|#))*$"

Topic = Annotated[
    str,
    Path(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=TOPIC_PATTERN,
        description="Dot-separated segments of `[a-z0-9_-]`.",
        examples=["user.signup"],
    ),
]


class PublishIn(ApiModel):
    payload: JsonNotNull = Field(examples=[{"userId": 42, "email": "ann@example.com"}])
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=255, pattern=NO_NUL_PATTERN, examples=["signup-42"]
    )


@router.post(
    "/topics/{topic}/events",
    status_code=202,
    response_model=Published,
    responses=problem_responses(422),
)
async def publish(topic: Topic, body: PublishIn, client: ClientDep) -> Response:
    """Publish an event; it is committed with all its deliveries before this returns.

    A repeat with the same `idempotencyKey` returns the first event's id and delivers nothing.
    """
    return await _publish(client, topic, body)


async def _publish(client: Client, topic: str, body: PublishIn) -> Response:
    result = await client.publish(topic, body.payload, body.idempotency_key)
    # Built typed and serialised once, here: returned as a model, FastAPI would validate it
    # against `response_model` again and encode it through its generic path (the hot route).
    return Response(published(result).model_dump_json(), 202, media_type="application/json")


_TOPIC_RE: Final = re.compile(TOPIC_PATTERN)

#: `publish` for `HotRoutes` (ripple.platform.api.hot_routes): same model, check and answer.
HOT_ROUTES: Final = (
    HotRoute(
        prefix="/topics/",
        suffix="/events",
        param_ok=lambda topic: len(topic) <= MAX_NAME_LENGTH and bool(_TOPIC_RE.fullmatch(topic)),
        body=PublishIn,
        answer=_publish,
    ),
)


@router.get(
    "/topics/{topic}/explain",
    response_model=ExplanationOut,
    responses=problem_responses(400, 422),
)
async def explain(
    topic: Topic,
    client: ClientDep,
    payload: Annotated[
        str,
        Query(
            max_length=65_536,
            description="The event payload as JSON text (not `null`).",
            # Declared as a JSON-encoded parameter: any JSON value except null.
            json_schema_extra={"x-ripple-json": True},
        ),
    ] = "{}",
) -> ExplanationOut:
    """Dry run: which subscriptions and waits an event would reach, and why others would not."""
    try:
        value = json.loads(payload)
    except (ValueError, RecursionError) as exc:
        raise ProblemError(
            400, f"`payload` is not valid JSON: {exc}", slug="malformed-json"
        ) from exc
    return explanation_out(await client.explain(topic, value))
