"""`EventSearch`: published events listed by topic, time window and payload containment
(`client.list_events`). Every query is bounded: a time window of at most `MAX_WINDOW` and a
page `limit`; a `where` is answered by the payload index when it is rare, else by walking the
events' time indexes newest first."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool, map_errors, pooled
from ripple.platform.errors import InvalidInput
from ripple.platform.events import event_store

__all__ = ["DEFAULT_WINDOW", "MAX_WINDOW", "Event", "EventPage", "EventSearch"]

#: The window searched when `since` is not given: the hour before `until`.
DEFAULT_WINDOW: Final = timedelta(hours=1)
#: The widest window one search may scan.
MAX_WINDOW: Final = timedelta(days=31)


@dataclass(frozen=True, slots=True)
class Event:
    """A published event."""

    event_id: str
    topic: str
    payload: Any
    published_at: datetime
    idempotency_key: str | None = None
    trace: dict[str, str] | None = None


@dataclass(frozen=True, slots=True)
class EventPage:
    """A page of events, newest first; pass `next_cursor` back for the next page."""

    items: list[Event]
    next_cursor: str | None


def _utc(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _encode_cursor(event: Event) -> str:
    raw = json.dumps([event.published_at.isoformat(), event.event_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        at, event_id = json.loads(raw)
        return datetime.fromisoformat(at), str(event_id)
    except (ValueError, TypeError):
        raise InvalidInput("invalid cursor: pass back a next_cursor", field="cursor") from None


class EventSearch:
    """List published events (`client.list_events`)."""

    def __init__(self, pool: Pool, settings: Settings) -> None:
        self.pool = pool
        self.settings = settings

    async def list_events(
        self,
        topic: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        where: dict[str, Any] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> EventPage:
        """Events newest first in `[since, until)` (default: the last hour), of `topic` when
        given, whose payload contains `where` (`{"customerId": 42}` matches payloads with
        that key and value, nested objects and arrays alike)."""
        if not 1 <= limit <= self.settings.max_page_size:
            raise InvalidInput(f"limit must be 1-{self.settings.max_page_size}", field="limit")
        if where is not None and not isinstance(where, dict):
            raise InvalidInput(
                'where must be a JSON object, e.g. {"customerId": 42}', field="where"
            )
        if topic is not None and (not isinstance(topic, str) or not topic or "\x00" in topic):
            raise InvalidInput("topic must be a topic name", field="topic")
        end = _utc(until) if until is not None else datetime.now(UTC) + timedelta(seconds=1)
        start = _utc(since) if since is not None else end - DEFAULT_WINDOW
        if start >= end:
            raise InvalidInput("since must be before until", field="since")
        if end - start > MAX_WINDOW:
            raise InvalidInput(
                f"the window since..until is longer than {MAX_WINDOW.days} days: narrow it",
                field="since",
            )
        after = _decode_cursor(cursor) if cursor is not None else None
        with map_errors():
            rows = await event_store.search_events(
                self.pool,
                since=start,
                until=end,
                topic=topic,
                where=where,
                after=after,
                limit=limit + 1,
                plan_each=not pooled(self.settings),
            )
        items = [
            Event(r.id, r.topic, r.payload, r.created_at, r.idempotency_key, r.trace)
            for r in rows[:limit]
        ]
        return EventPage(items, _encode_cursor(items[-1]) if len(rows) > limit else None)
