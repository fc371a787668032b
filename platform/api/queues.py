"""Routes for durable queues: send, receive (long-poll), ack, nack, stats, dead letters, redrive."""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import APIRouter, Path, Response
from pydantic import Field

from ripple.platform.api.deps import ClientDep, Limit
from ripple.platform.api.models import (
    JSON_NUMBER,
    NO_NUL_PATTERN,
    ApiModel,
    JsonBool,
    JsonFloat,
    JsonInt,
    JsonNotNull,
    jsonable,
)
from ripple.platform.api.problems import problem_responses
from ripple.platform.api.results import (
    DeadLetterOut,
    MessageOut,
    Received,
    Redriven,
    Sent,
    Stats,
    stats_out,
)

__all__ = ["router"]

router = APIRouter(tags=["queues"])

#: What `validate_queue_name` and the receipt parser in `ripple.subscribers.queues.queues` accept,
#: declared so the OpenAPI says it (tests/unit/platform/test_api_patterns.py keeps them equal).
QUEUE_NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
RECEIPT_PATTERN: Final = r"^[0-9]{1,18}\.[0-9]{1,9}$"

Queue = Annotated[
    str,
    Path(
        pattern=QUEUE_NAME_PATTERN,
        description="Queue name: 1-128 letters, digits, `_`, `.` or `-`, starting with a "
        "letter or digit.",
        examples=["audit"],
    ),
]
Receipt = Annotated[
    str, Path(pattern=RECEIPT_PATTERN, description="A received message's `receipt`.")
]


class SendIn(ApiModel):
    body: JsonNotNull = Field(examples=[{"x": 1}])
    headers: dict[str, Annotated[str, Field(pattern=NO_NUL_PATTERN)]] | None = Field(
        default=None, examples=[{"source": "billing"}]
    )
    group_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=255,
        pattern=NO_NUL_PATTERN,
        description="FIFO group (single-flight).",
    )
    delay: Annotated[float, Field(ge=0, le=14 * 86400), JSON_NUMBER] | None = Field(
        default=None, description="Seconds (≤ 14 days)."
    )
    deduplication_id: str | None = Field(
        default=None, min_length=1, max_length=255, pattern=NO_NUL_PATTERN
    )


class ReceiveIn(ApiModel):
    max_messages: JsonInt = Field(default=10, ge=1, le=1000)
    visibility_timeout: JsonFloat = Field(
        default=30.0,
        ge=0,
        le=12 * 3600,
        description="Seconds (0: visible again at once, as in SQS).",
    )
    wait: JsonFloat = Field(default=0.0, ge=0, le=20, description="Long-poll seconds (≤ 20).")
    fair: JsonBool = Field(
        default=False,
        description="Round robin across `groupId`s (ungrouped messages are one more group), "
        "FIFO within each: a group with a huge backlog cannot starve the others.",
    )


class NackIn(ApiModel):
    delay: JsonFloat = Field(default=0.0, ge=0, le=12 * 3600, description="Seconds until visible.")


class RedriveIn(ApiModel):
    limit: Annotated[int, Field(ge=1, le=100_000), JSON_NUMBER] | None = None


@router.post(
    "/queues/{queue}/messages",
    status_code=201,
    response_model=Sent,
    responses=problem_responses(422),
)
async def send(queue: Queue, body: SendIn, client: ClientDep) -> Sent:
    """Send one message."""
    sent = await client.queues.send(
        queue,
        body.body,
        headers=body.headers,
        group_id=body.group_id,
        delay=body.delay,
        deduplication_id=body.deduplication_id,
    )
    return Sent(id=str(sent))


@router.post(
    "/queues/{queue}/messages/receive",
    response_model=Received,
    responses=problem_responses(422),
)
async def receive(queue: Queue, body: ReceiveIn, client: ClientDep) -> Received:
    """Receive up to `maxMessages`, waiting up to `wait` seconds for the first one.

    Each message stays invisible for `visibilityTimeout` seconds; ack it with its `receipt`.
    """
    messages = await client.queues.receive(
        queue,
        max_messages=body.max_messages,
        visibility_timeout=body.visibility_timeout,
        wait=body.wait,
        fair=body.fair,
    )
    return Received(messages=[MessageOut.model_validate(jsonable(m)) for m in messages])


@router.delete(
    "/queues/{queue}/messages/{receipt}",
    status_code=204,
    responses=problem_responses(404, 409, 422),
)
async def ack(queue: Queue, receipt: Receipt, client: ClientDep) -> Response:
    """Acknowledge (delete) a received message by its receipt."""
    await client.queues.ack(queue, receipt)
    return Response(status_code=204)


@router.post(
    "/queues/{queue}/messages/{receipt}/nack",
    status_code=204,
    responses=problem_responses(404, 409, 422),
)
async def nack(queue: Queue, receipt: Receipt, body: NackIn, client: ClientDep) -> Response:
    """Give a received message back; it becomes visible again after `delay` seconds."""
    await client.queues.nack(queue, receipt, delay=body.delay)
    return Response(status_code=204)


@router.get("/queues/{queue}/stats", response_model=Stats, responses=problem_responses(422))
async def stats(queue: Queue, client: ClientDep) -> Stats:
    """Depth, in-flight count, oldest message age and dead letters of a queue."""
    return stats_out(await client.queues.stats(queue))


@router.get(
    "/queues/{queue}/dead-letters",
    response_model=list[DeadLetterOut],
    responses=problem_responses(422),
)
async def dead_letters(queue: Queue, client: ClientDep, limit: Limit) -> list[DeadLetterOut]:
    """Messages that exceeded the queue's receive limit, oldest first."""
    found = await client.queues.dead_letters(queue, limit)
    return [DeadLetterOut.model_validate(jsonable(m)) for m in found]


@router.post(
    "/queues/{queue}/dead-letters/redrive",
    response_model=Redriven,
    responses=problem_responses(422),
)
async def redrive(queue: Queue, client: ClientDep, body: RedriveIn | None = None) -> Redriven:
    """Move dead letters (up to `limit`, default 1000) back to the queue with fresh counts."""
    limit = body.limit if body is not None and body.limit is not None else 1000
    return Redriven(redriven=await client.queues.redrive(queue, limit=limit))
