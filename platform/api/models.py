"""The API's JSON shapes: camelCase pydantic models and the conversion of internal records.

Internal records are dataclasses with snake_case fields; `jsonable()` turns them into JSON with
camelCase field names while leaving user data (payloads, inputs, filters) exactly as given.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any, Final

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    WithJsonSchema,
)
from pydantic.alias_generators import to_camel

__all__ = [
    "JSON_NUMBER",
    "MAX_WHERE_LENGTH",
    "NO_NUL_PATTERN",
    "UUID_PATTERN",
    "ApiModel",
    "DateTimeIn",
    "JsonBool",
    "JsonFloat",
    "JsonInt",
    "JsonNotNull",
    "OutModel",
    "Published",
    "RunOut",
    "RunPage",
    "StepOut",
    "SubscriptionOut",
    "camel",
    "jsonable",
    "run_out",
    "step_out",
    "subscription_out",
]


class ApiModel(BaseModel):
    """Base of every request and response body: camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        serialize_by_alias=True,
        extra="forbid",
    )


class OutModel(ApiModel):
    """Base of response bodies: fields the record has beyond the documented ones are dropped."""

    # Validators are built on first use: a CLI command uses one or two of the response shapes,
    # and building all of them cost more than its whole query.
    model_config = ConfigDict(extra="ignore", defer_build=True)


#: A UUID in its canonical 8-4-4-4-12 form (what the API answers and accepts).
UUID_PATTERN: Final = (
    r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"
)

# RFC 3339 `date-time` (what OpenAPI's `format: date-time` means): a date, `T`, a time and an
# offset. pydantic alone would also take numbers and numeric strings as Unix timestamps, which
# the declared format does not allow.
_RFC3339: Final = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)


def _rfc3339(value: Any) -> Any:
    if isinstance(value, datetime):
        return value
    if not isinstance(value, str) or not _RFC3339.fullmatch(value):
        raise ValueError("expected an RFC 3339 date-time with an offset, e.g. 2026-01-31T09:30:00Z")
    return value


def _utc(value: datetime) -> datetime:
    # RFC 3339 allows offsets up to 23:59; Postgres refuses those beyond 15:59, so every time
    # reaches the database in UTC. An instant that lies past the ends of the years 1-9999 in
    # UTC is taken as the nearest one within them.
    if value.tzinfo is None:
        return value
    try:
        return value.astimezone(UTC)
    except OverflowError:
        offset = value.utcoffset()
        ahead = offset is not None and offset > timedelta(0)
        return (datetime.min if ahead else datetime.max).replace(tzinfo=UTC)


#: A date-time input: RFC 3339 text with an offset (no numbers, no naive times), in UTC.
DateTimeIn = Annotated[datetime, BeforeValidator(_rfc3339), AfterValidator(_utc)]

#: A string without U+0000 (Postgres text cannot hold it), for free-text fields.
NO_NUL_PATTERN: Final = r"^[^\x00]*$"
#: Longest search text (a run filter, an event payload match) the API and the dashboard take.
MAX_WHERE_LENGTH: Final = 4096


def _json_number(value: Any) -> Any:
    # pydantic's lax mode takes `true` for 1 and "5" for 5; the schema says number, so only
    # JSON numbers pass (an integral float such as 2.0 is still a JSON Schema integer).
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("expected a JSON number")
    return value


#: Refuses what is not a JSON number; put bounds before it (`Annotated[int, Field(ge=1),
#: JSON_NUMBER]`), as after it pydantic leaves them out of the JSON Schema of an optional field.
JSON_NUMBER: Final = BeforeValidator(_json_number)
#: JSON-typed request fields: a number is not a boolean or a string, nor a boolean a number.
JsonInt = Annotated[int, JSON_NUMBER]
JsonFloat = Annotated[float, JSON_NUMBER]
JsonBool = Annotated[bool, Strict()]

#: Any JSON value except `null` (payloads, message bodies: `{}` stands for "no data").
JsonNotNull = Annotated[
    Any,
    WithJsonSchema({"not": {"type": "null"}, "description": "Any JSON value except null."}),
]


def camel(name: str) -> str:
    """`next_cursor` -> `nextCursor`."""
    return to_camel(name)


def jsonable(value: Any) -> Any:
    """JSON-ready form of `value`; dataclass and model field names become camelCase.

    Keys of plain dicts are kept as they are: they are user data.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            camel(f.name): jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True)
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    return str(value)


# -- response shapes shared by the routes and the CLI (no FastAPI import here) ------------


class RunOut(OutModel):
    run_id: str
    workflow: str
    version: int | None = None
    status: str
    input: Any = None
    output: Any = None
    error: Any = None
    attempt: int | None = None
    created_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    parent_run_id: str | None = None
    priority: int = 0
    #: why a pending run is not claimed yet: concurrency, throttle or debounce
    blocked_by: str | None = None
    forked_from: str | None = None


class RunPage(OutModel):
    items: list[RunOut]
    next_cursor: str | None = None


class StepOut(OutModel):
    key: str
    kind: str
    status: str
    attempts: int | None = None
    output: Any = None
    error: Any = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    due_at: datetime | None = Field(default=None, description="When a sleep or wait ends.")
    duration_ms: float | None = None


def run_out(run: Any) -> RunOut:
    return RunOut.model_validate(jsonable(run))


def step_out(step: Any) -> StepOut:
    data = jsonable(step)
    started, completed = getattr(step, "started_at", None), getattr(step, "completed_at", None)
    if started is not None and completed is not None:
        data["durationMs"] = round((completed - started).total_seconds() * 1000, 3)
    return StepOut.model_validate(data)


class ScheduleOut(OutModel):
    name: str
    workflow: str | None = None
    topic: str | None = None
    input: Any = None
    cron: str | None = None
    every_seconds: float | None = None
    timezone: str = "UTC"
    overlap: str = "skip"
    paused: bool = False
    source: str = "api"
    next_run_at: datetime | None = None
    last_tick_at: datetime | None = None
    last_run_id: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


def schedule_out(info: Any) -> ScheduleOut:
    return ScheduleOut.model_validate(jsonable(info))


class SubscriptionOut(OutModel):
    id: str
    pattern: str
    target: dict[str, Any]
    filter: dict[str, Any] | None = None
    status: str | None = None
    status_reason: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    backfill_since: datetime | None = Field(
        default=None, description="Set when created with a backfill."
    )
    backfill_delivered: int = Field(default=0, description="Events the backfill delivered.")
    backfill_done_at: datetime | None = Field(
        default=None, description="When the backfill finished (null while it runs)."
    )


def subscription_out(sub: Any, *, mask: bool = True) -> SubscriptionOut:
    """The API form of a subscription; `mask` hides a webhook's secret."""
    data = jsonable(sub)
    target = data.get("target")
    if mask and isinstance(target, dict) and "secret" in target:
        # Secrets are shown once, at creation; later reads mask them.
        data["target"] = {**target, "secret": "whsec_…"}
    return SubscriptionOut.model_validate(data)


class Published(OutModel):
    event_id: str
    deliveries: int = Field(description="Deliveries written (0 for an idempotent repeat).")
    duplicate: bool = Field(
        default=False, description="True when the idempotency key was seen before."
    )
    waits_resolved: int = Field(default=0, description="Waiting workflow runs it resumed.")
