"""Routes for webhook deliveries: list, attempts, redrive (one or all failed); a webhook
endpoint's circuit breaker (read, resume now)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import Field

from ripple.platform.api.deps import ClientDep, Limit, UuidPath
from ripple.platform.api.models import UUID_PATTERN, ApiModel, DateTimeIn, OutModel, jsonable
from ripple.platform.api.problems import ProblemError, problem_responses
from ripple.platform.api.results import DeliveryPage, EndpointOut, Redriven

__all__ = ["router"]

router = APIRouter(tags=["deliveries"])

DeliveryId = UuidPath
DELIVERY_STATUSES = ("pending", "delivered", "failed")


class AttemptOut(OutModel):
    attempt: int
    started_at: datetime
    latency_ms: float
    outcome: str
    status_code: int | None = None
    error: str | None = None
    response_body: str | None = Field(default=None, description="First 2 KiB of the response.")


class RedriveFailedIn(ApiModel):
    subscription_id: str | None = Field(
        default=None, pattern=UUID_PATTERN, json_schema_extra={"format": "uuid"}
    )
    since: DateTimeIn | None = None


@router.get("/deliveries", response_model=DeliveryPage, responses=problem_responses(422))
async def list_deliveries(
    client: ClientDep,
    limit: Limit,
    status: Annotated[str | None, Query(pattern="^(" + "|".join(DELIVERY_STATUSES) + ")$")] = None,
    subscription_id: Annotated[
        str | None,
        Query(alias="subscriptionId", pattern=UUID_PATTERN, json_schema_extra={"format": "uuid"}),
    ] = None,
    cursor: Annotated[
        str | None,
        Query(
            pattern=UUID_PATTERN,
            description="The `nextCursor` of the previous page (a delivery id).",
            json_schema_extra={"format": "uuid"},
        ),
    ] = None,
) -> DeliveryPage:
    """Webhook deliveries, newest first, with their last outcome."""
    page = await client.deliveries.list(
        status=status, subscription_id=subscription_id, limit=limit, cursor=cursor
    )
    return DeliveryPage.model_validate(jsonable(page))


@router.get(
    "/deliveries/{delivery_id}/attempts",
    response_model=list[AttemptOut],
    responses=problem_responses(404),
)
async def list_attempts(delivery_id: DeliveryId, client: ClientDep) -> list[AttemptOut]:
    """Every attempt of a delivery, oldest first: status code, latency, error, response start."""
    if await client.deliveries.get(delivery_id) is None:
        raise ProblemError(404, f"no delivery {delivery_id}")
    return [
        AttemptOut.model_validate(jsonable(a))
        for a in await client.deliveries.attempts(delivery_id)
    ]


@router.post(
    "/deliveries/{delivery_id}/redrive",
    response_model=Redriven,
    responses=problem_responses(404, 409),
)
async def redrive(delivery_id: DeliveryId, client: ClientDep) -> Redriven:
    """Deliver a failed delivery again, from a fresh attempt budget."""
    await client.deliveries.redrive(delivery_id)
    return Redriven(redriven=1)


@router.post("/deliveries/redrive", response_model=Redriven, responses=problem_responses(422))
async def redrive_failed(client: ClientDep, body: RedriveFailedIn | None = None) -> Redriven:
    """Deliver every failed delivery again (optionally of one subscription, or since a time)."""
    body = body or RedriveFailedIn()
    count = await client.deliveries.redrive_failed(
        subscription_id=body.subscription_id, since=body.since
    )
    return Redriven(redriven=int(count))


@router.get(
    "/subscriptions/{subscription_id}/endpoint",
    response_model=EndpointOut,
    responses=problem_responses(404, 409),
)
async def get_endpoint(subscription_id: UuidPath, client: ClientDep) -> EndpointOut:
    """A webhook subscription's endpoint: circuit breaker state, failures in a row, in flight;
    409 for a subscription whose target is not a webhook."""
    return EndpointOut.model_validate(jsonable(await client.deliveries.endpoint(subscription_id)))


@router.post(
    "/subscriptions/{subscription_id}/endpoint/resume",
    response_model=EndpointOut,
    responses=problem_responses(404, 409),
)
async def resume_endpoint(subscription_id: UuidPath, client: ClientDep) -> EndpointOut:
    """Resume a webhook endpoint now: close its circuit, send its waiting deliveries at once;
    409 for a subscription whose target is not a webhook."""
    health = await client.deliveries.resume_endpoint(subscription_id)
    return EndpointOut.model_validate(jsonable(health))
