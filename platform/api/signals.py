"""Route for signals matched by payload: resume every run waiting on an event name."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field
from pydantic.json_schema import SkipJsonSchema

from ripple.platform.api.deps import ClientDep
from ripple.platform.api.models import NO_NUL_PATTERN, ApiModel
from ripple.platform.api.problems import problem_responses
from ripple.platform.api.results import Resumed
from ripple.platform.api.runs import KeyHeader, idempotency_key

__all__ = ["router"]

router = APIRouter(tags=["signals"])


class SignalMatching(ApiModel):
    event: str = Field(
        min_length=1, max_length=255, pattern=NO_NUL_PATTERN, examples=["user.verified"]
    )
    payload: Any = Field(default=None, examples=[{"userId": 42}])
    #: The key as a body field, as the Python API's contract names it; the OpenAPI document
    #: gives one way, the `Idempotency-Key` header, so that two keys cannot disagree.
    idempotency_key: SkipJsonSchema[str | None] = Field(
        default=None, min_length=1, max_length=255, pattern=NO_NUL_PATTERN
    )


@router.post("/signals", response_model=Resumed, responses=problem_responses(422))
async def signal_matching(
    body: SignalMatching, client: ClientDep, key_header: KeyHeader = None
) -> Resumed:
    """Resume every run waiting on `event` whose `match` the payload contains.

    With an `Idempotency-Key` header, a repeat (per event) returns the first `resumed` and
    resumes nothing.
    """
    key = idempotency_key(key_header, body.idempotency_key)
    resumed = await client.signal_matching(body.event, body.payload, idempotency_key=key)
    return Resumed(resumed=resumed)
