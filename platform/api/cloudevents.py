"""`POST /v1/events`: CloudEvents 1.0 ingest in structured, batched and binary HTTP mode.

Reads the request's mode and attributes (`ripple.platform.events.cloudevents`) and publishes
each event through the client's one publish path, so topic schemas, idempotency and fan-out
apply as for any publish. Attribute problems are 400s naming the attribute; a batch answers
each event on its own, in order.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import Field

import ripple.platform.events.cloudevents as ce
from ripple.platform.api.deps import ClientDep
from ripple.platform.api.models import OutModel, Published
from ripple.platform.api.problems import problem_response, problem_responses
from ripple.platform.api.results import published
from ripple.platform.api.topics import TOPIC_PATTERN
from ripple.platform.client import Client
from ripple.platform.errors import InvalidInput
from ripple.platform.events.topics import MAX_NAME_LENGTH

__all__ = ["router"]

router = APIRouter(tags=["cloudevents"])

_STRING: Final = {"type": "string", "pattern": r"^[^\x00]*$"}
_REQUIRED_STRING: Final = {"type": "string", "minLength": 1, "pattern": r"^[^\x00]+$"}
#: A structured-mode CloudEvent as `ripple.platform.events.cloudevents` accepts it.
STRUCTURED_SCHEMA: Final[dict[str, Any]] = {
    "type": "object",
    "title": "CloudEvent",
    "description": "A CloudEvent 1.0 in JSON format: `type` is the topic, `data` the payload.",
    "required": ["specversion", "id", "source", "type"],
    "properties": {
        "specversion": {"type": "string", "enum": ["1.0"]},
        "id": _REQUIRED_STRING,
        "source": {
            **_REQUIRED_STRING,
            "description": "Identifies the producer; CloudEvents 1.0 says a URI-reference, but "
            "Ripple takes any non-empty string (with `id`, it is the idempotency key).",
        },
        "type": {
            "type": "string",
            "minLength": 1,
            "maxLength": MAX_NAME_LENGTH,
            "pattern": TOPIC_PATTERN,
            "description": "The topic.",
        },
        "subject": _STRING,
        "time": {**_STRING, "format": "date-time"},
        "dataschema": {**_STRING, "format": "uri"},
        "datacontenttype": _STRING,
        "data": {"description": "The payload (any JSON; absent or null: `{}`)."},
    },
    "propertyNames": {"pattern": r"^[a-z0-9]{1,64}$"},
    "additionalProperties": {
        "description": "An extension attribute.",
        "anyOf": [
            _STRING,
            {"type": "boolean"},
            {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1},
        ],
    },
    "example": {
        "specversion": "1.0",
        "id": "A234-1234-1234",
        "source": "https://shop.example.com/signup",
        "type": "user.signup",
        "time": "2026-01-01T12:00:00Z",
        "data": {"userId": 42},
    },
}


class Refused(OutModel):
    status: int = Field(description="The HTTP status this event alone would have got.")
    detail: str


class BatchResults(OutModel):
    results: list[Published | Refused] = Field(
        description="One item per event, in order: `{eventId, deliveries}` or `{status, detail}`."
    )


_OPENAPI: Final[dict[str, Any]] = {
    "requestBody": {
        "required": True,
        "content": {
            ce.STRUCTURED_MEDIA_TYPE: {"schema": STRUCTURED_SCHEMA},
            ce.BATCH_MEDIA_TYPE: {"schema": {"type": "array", "items": {"type": "object"}}},
        },
    },
}


@router.post(
    "/events",
    status_code=202,
    response_model=Published | BatchResults,
    responses=problem_responses(400, 422),
    openapi_extra=_OPENAPI,
)
async def ingest(request: Request, client: ClientDep) -> Response:
    """Publish CloudEvents 1.0: `type` is the topic, `data` the payload.

    - structured mode: `Content-Type: application/cloudevents+json`, the event as JSON;
    - batched mode: `Content-Type: application/cloudevents-batch+json`, a JSON array of events,
      each published or refused on its own: `{results: [...]}` in order;
    - binary mode: the attributes as `ce-*` headers (`ce-specversion: 1.0`, `ce-id`,
      `ce-source`, `ce-type`, ...), the body is the JSON data.

    (`source`, `id`) is the idempotency key: a producer's retry returns the same `eventId`.
    `subject`, `time`, `dataschema`, `datacontenttype` and extensions are kept with the event.
    A missing or invalid attribute, or a `specversion` other than `1.0`, is a 400 naming it.
    """
    media = (request.headers.get("content-type") or "").split(";", 1)[0].strip().lower()
    body = await request.body()
    try:
        if media == ce.BATCH_MEDIA_TYPE:
            return await _batch(client, ce.parse_batch(_json(body)))
        if media == ce.STRUCTURED_MEDIA_TYPE:
            event = ce.parse_structured(_json(body))
        elif any(name.startswith("ce-") for name in request.headers):
            headers = {k: v for k, v in request.headers.items() if k.startswith("ce-")}
            event = ce.parse_binary(
                headers, request.headers.get("content-type"), _json(body) if body else None
            )
        else:
            raise InvalidInput(
                f"send a CloudEvent: Content-Type {ce.STRUCTURED_MEDIA_TYPE} or "
                f"{ce.BATCH_MEDIA_TYPE}, or binary mode with ce-* headers (ce-specversion, "
                "ce-id, ce-source, ce-type)",
                field="specversion",
            )
    except InvalidInput as exc:
        return _refused(request, exc)
    except _Malformed as exc:
        return problem_response(
            400, str(exc), instance=request.url.path, slug="malformed-json", title="Malformed JSON"
        )
    result = await _publish(client, event)
    return Response(published(result).model_dump_json(), 202, media_type="application/json")


class _Malformed(Exception):
    pass


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise _Malformed(f"request body is not valid JSON: {exc}") from exc


def _refused(request: Request, exc: InvalidInput) -> JSONResponse:
    attribute = exc.field or "specversion"
    return problem_response(
        400,
        exc.message,
        instance=request.url.path,
        slug="invalid-cloudevent",
        title="Invalid CloudEvent",
        errors=[{"loc": ["cloudevent", attribute], "msg": exc.message, "type": "cloudevent"}],
    )


async def _publish(client: Client, event: ce.IncomingEvent) -> Any:
    return await client.publisher.publish(
        event.topic, event.payload, event.idempotency_key, cloudevent=event.attributes
    )


async def _batch(client: Client, events: list[ce.IncomingEvent | InvalidInput]) -> Response:
    async def one(event: ce.IncomingEvent | InvalidInput) -> Published | Refused:
        if isinstance(event, InvalidInput):
            return Refused(status=400, detail=event.message)
        try:
            return published(await _publish(client, event))
        except InvalidInput as exc:  # the payload (or its topic's schema) refused it
            return Refused(status=422, detail=exc.message)

    # An event repeated within the batch is answered as a retry of its first occurrence (the
    # order matters to the producer, and one group commit would not keep it).
    first: dict[str, int] = {}
    todo: list[ce.IncomingEvent | InvalidInput] = []
    repeats: dict[int, int] = {}
    for index, event in enumerate(events):
        if isinstance(event, ce.IncomingEvent):
            seen = first.setdefault(event.idempotency_key, index)
            if seen != index:
                repeats[index] = seen
                continue
        todo.append(event)
    # Concurrent publishes share group commits: a batch costs a few transactions, not one each.
    done = iter(await asyncio.gather(*(one(event) for event in todo)))
    results: list[Published | Refused] = []
    for index in range(len(events)):
        if index in repeats:
            original = results[repeats[index]]
            if isinstance(original, Published):
                original = original.model_copy(
                    update={"deliveries": 0, "duplicate": True, "waits_resolved": 0}
                )
            results.append(original)
        else:
            results.append(next(done))
    return Response(
        BatchResults(results=results).model_dump_json(), 202, media_type="application/json"
    )
