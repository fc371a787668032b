"""The API's JSON shapes: camelCase pydantic models and the conversion of internal records.

Internal records are dataclasses with snake_case fields; `jsonable()` turns them into JSON with
camelCase field names while leaving user data (payloads, inputs, filters) exactly as given.
"""

from __future__ import annotations

import dataclasses
import enum
from datetime import date, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

__all__ = ["ApiModel", "OutModel", "camel", "jsonable"]


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

    model_config = ConfigDict(extra="ignore")


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
