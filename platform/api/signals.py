"""Route for signals matched by payload: resume every run waiting on an event name."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import Field

from ripple.platform.api.deps import ClientDep
from ripple.platform.api.models import ApiModel
from ripple.platform.api.problems import problem_responses
from ripple.platform.api.results import Resumed
from ripple.platform.api.runs import KeyHeader, idempotency_key

__all__ = ["router"]

router = APIRouter(tags=["signals"])


class SignalMatching(ApiModel):
    event: str = Field(min_length=1, max_length=255, examples=["user.verified"])
    payload: Any = Field(default=None, examples=[{"userId": 42}])
    idempotency_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        description="A repeat with the same key (per event) returns the first `resumed` and "
        "resumes nothing (or send the `Idempotency-Key` header).",
        examples=["verified-42"],
    )


@router.post("/signals", response_model=Resumed, responses=problem_responses(422))
async def signal_matching(
    body: SignalMatching, client: ClientDep, key_header: KeyHeader = None
) -> Resumed:
    """Resume every run waiting on `event` whose `match` the payload contains."""
    key = idempotency_key(key_header, body.idempotency_key)
    resumed = await client.signal_matching(body.event, body.payload, idempotency_key=key)
    return Resumed(resumed=resumed)
