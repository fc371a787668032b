"""The dashboard's topic catalogue: `/ui/catalogue` (every topic with a schema or recent events)
and `/ui/catalogue/{topic}` (its schema versions, compatibility mode, a diff between versions,
the subscriptions matching it, events per minute and its last events).

Reads through the tables' owners (`schema_store`, `event_store`) and the `Client`; registering
a schema is an API/CLI action, the page only shows it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from ripple.platform.api.problems import ProblemError
from ripple.platform.events import event_store
from ripple.platform.events.contracts import schema_store
from ripple.platform.events.topics import compile_pattern, validate_topic
from ripple.platform.ui.routes import PREFIX, ClientDep, Session, render

__all__ = ["router", "schema_diff"]

router = APIRouter(prefix=PREFIX, include_in_schema=False)

#: The window events per minute are counted over.
RATE_WINDOW: Final = timedelta(minutes=10)
#: Topics listed at most (those with a schema, then those with events in the window).
MAX_TOPICS: Final = 500
#: Schema versions and last events a topic page shows.
LAST_EVENTS: Final = 20


@router.get("/catalogue")
async def catalogue(request: Request, nonce: Session, client: ClientDep) -> Response:
    since = datetime.now(UTC) - RATE_WINDOW
    async with client.read_pool.acquire() as conn:
        latest = {v.topic: v for v in await schema_store.latest_schemas(conn)}
        activity = await event_store.topic_activity(conn, since, MAX_TOPICS)
    subscriptions = await client.list_subscriptions()
    rows = []
    for topic in sorted(set(latest) | set(activity))[:MAX_TOPICS]:
        count, last_at = activity.get(topic, (0, None))
        rows.append(
            {
                "topic": topic,
                "schema": latest.get(topic),
                "per_minute": count / (RATE_WINDOW.total_seconds() / 60),
                "last_at": last_at,
                "subscriptions": sum(
                    1 for s in subscriptions if compile_pattern(s.pattern).matches(topic)
                ),
            }
        )
    return render(request, nonce, "catalogue.html", rows=rows, window=RATE_WINDOW.total_seconds())


@router.get("/catalogue/{topic}")
async def topic_page(
    request: Request,
    topic: str,
    nonce: Session,
    client: ClientDep,
    base: Annotated[int | None, Query(ge=1)] = None,
    head: Annotated[int | None, Query(ge=1)] = None,
) -> Response:
    since = datetime.now(UTC) - RATE_WINDOW
    try:
        validate_topic(topic)
    except ValueError as exc:
        raise ProblemError(404, f"no topic {topic!r}") from exc
    async with client.read_pool.acquire() as conn:
        versions = await schema_store.list_schemas(conn, topic)
        count = await event_store.topic_events_since(conn, topic, since)
        events = await event_store.recent_events(conn, topic, LAST_EVENTS)
    by_number = {v.version: v for v in versions}
    new = by_number.get(head or 0) or (versions[-1] if versions else None)
    old = by_number.get(base or 0) or by_number.get(new.version - 1 if new else 0)
    diff = schema_diff(old.schema, new.schema) if old and new and old is not new else None
    subscriptions = [c.record for c in await client.subscriptions.matching(topic)]
    return render(
        request,
        nonce,
        "catalogue_topic.html",
        topic=topic,
        versions=versions,
        compatibility=versions[-1].compatibility if versions else None,
        old=old,
        new=new,
        diff=diff,
        subscriptions=subscriptions,
        per_minute=count / (RATE_WINDOW.total_seconds() / 60),
        events=events,
        window=RATE_WINDOW.total_seconds(),
    )


def _pointer(path: str, key: str | int) -> str:
    return f"{path}/{str(key).replace('~', '~0').replace('/', '~1')}"


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 120 else text[:117] + "..."


def schema_diff(old: Any, new: Any, path: str = "") -> list[tuple[str, str, str]]:
    """What changed from `old` to `new` (JSON values), as (`+`/`-`/`~`, JSON pointer, text)
    lines in document order: added, removed and changed values, down to the leaves."""
    if isinstance(old, dict) and isinstance(new, dict):
        lines: list[tuple[str, str, str]] = []
        for key in list(old) + [k for k in new if k not in old]:
            where = _pointer(path, key)
            if key not in new:
                lines.append(("-", where, _short(old[key])))
            elif key not in old:
                lines.append(("+", where, _short(new[key])))
            else:
                lines.extend(schema_diff(old[key], new[key], where))
        return lines
    scalars = isinstance(old, list) and isinstance(new, list)
    if scalars and all(not isinstance(v, dict | list) for v in old + new):
        # Lists of scalars (`required`, `enum`, `type`): what left and what came.
        removed = [("-", path or "/", _short(v)) for v in old if v not in new]
        added = [("+", path or "/", _short(v)) for v in new if v not in old]
        if removed or added:
            return removed + added
    if old != new:
        return [("~", path or "/", f"{_short(old)} → {_short(new)}")]
    return []
