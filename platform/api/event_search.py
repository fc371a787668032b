"""`GET /v1/events`: published events by topic, time window and payload containment."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field

from ripple.platform.api.deps import ClientDep, Limit
from ripple.platform.api.models import MAX_WHERE_LENGTH, DateTimeIn, OutModel
from ripple.platform.api.problems import ProblemError, problem_responses
from ripple.platform.errors import InvalidInput

__all__ = ["EventOut", "EventPageOut", "router"]

router = APIRouter(tags=["events"])


class EventOut(OutModel):
    event_id: str
    topic: str
    payload: Any = None
    published_at: datetime
    idempotency_key: str | None = None


class EventPageOut(OutModel):
    items: list[EventOut]
    next_cursor: str | None = Field(default=None, description="Pass back as `cursor`.")


def _json_object(where: str) -> dict[str, Any]:
    try:
        value = json.loads(where)
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"where is not valid JSON: {exc}", field="where") from exc
    if not isinstance(value, dict):
        raise InvalidInput('where must be a JSON object, e.g. {"customerId": 42}', field="where")
    return value


@router.get("/events", response_model=EventPageOut, responses=problem_responses(400, 422))
async def search_events(
    client: ClientDep,
    limit: Limit,
    topic: Annotated[str | None, Query(min_length=1, max_length=255)] = None,
    since: Annotated[
        DateTimeIn | None,
        Query(description="Published at or after (default: an hour before until)."),
    ] = None,
    until: Annotated[
        DateTimeIn | None, Query(description="Published before (default: now).")
    ] = None,
    where: Annotated[
        str | None,
        Query(
            max_length=MAX_WHERE_LENGTH,
            description='A JSON object the payload must contain, e.g. `{"customerId": 42}`; '
            "other JSON text is refused with a 422 naming `where`.",
        ),
    ] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> EventPageOut:
    """Events newest first in a window of at most 31 days, optionally of one topic and whose
    payload contains `where`.

    Checked by the server, each refused with a 422 naming the field: `since` before `until`
    and at most 31 days before it (or before now), `where` a JSON object, `cursor` a
    `nextCursor` this search answered."""
    contains = None
    try:
        if where is not None:
            contains = _json_object(where)
        page = await client.list_events(topic, since, until, contains, limit, cursor)
    except InvalidInput as exc:
        raise ProblemError.invalid_input(exc) from exc
    return EventPageOut(
        items=[
            EventOut(
                event_id=e.event_id,
                topic=e.topic,
                payload=e.payload,
                published_at=e.published_at,
                idempotency_key=e.idempotency_key,
            )
            for e in page.items
        ],
        next_cursor=page.next_cursor,
    )
