"""Routes for subscriptions: create, list, get, pause, resume, delete."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import Field

from ripple.platform.api.deps import ClientDep, UuidPath
from ripple.platform.api.models import (
    ApiModel,
    DateTimeIn,
    SubscriptionOut,
    subscription_out,
)
from ripple.platform.api.problems import ProblemError, problem_responses
from ripple.platform.api.topics import SUBSCRIPTION_PATTERN
from ripple.platform.events.topics import MAX_NAME_LENGTH
from ripple.subscribers import Target

__all__ = ["router"]

router = APIRouter(tags=["subscriptions"])

SubscriptionId = UuidPath

_TARGET_EXAMPLES = [
    {"type": "workflow", "workflow": "onboard-user"},
    {"type": "queue", "queue": "audit"},
    {"type": "webhook", "url": "https://example.com/hooks/ripple", "timeout": 10.0},
]


class SubscribeIn(ApiModel):
    pattern: str = Field(
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        pattern=SUBSCRIPTION_PATTERN,
        description="Topic pattern: `*` matches one segment, `#` zero or more.",
        examples=["user.*"],
    )
    target: Target = Field(
        description="`{type: queue, queue}` | `{type: webhook, url, secret?, retry?, timeout?}` "
        "| `{type: workflow, workflow}`; a webhook without `secret` gets a generated one.",
        examples=_TARGET_EXAMPLES,
    )
    filter: dict[str, Any] | None = Field(
        default=None,
        description="Deliver only events whose payload contains this JSON.",
        examples=[{"plan": "pro"}],
    )
    backfill_since: DateTimeIn | None = Field(
        default=None,
        description="Also deliver the retained events published since this time (the request "
        "returns once they are delivered), then continue live.",
    )


async def _get(client: ClientDep, subscription_id: str) -> Any:
    sub = await client.get_subscription(subscription_id)
    if sub is None:
        raise ProblemError(404, f"no subscription {subscription_id}")
    return sub


@router.post(
    "/subscriptions",
    status_code=201,
    response_model=SubscriptionOut,
    responses=problem_responses(422),
)
async def subscribe(body: SubscribeIn, client: ClientDep) -> SubscriptionOut:
    """Subscribe a target to topics matching `pattern`. The response shows a webhook's secret."""
    sub = await client.subscribe(
        body.pattern, body.target, body.filter, backfill_since=body.backfill_since
    )
    return subscription_out(sub, mask=False)


@router.get("/subscriptions", response_model=list[SubscriptionOut])
async def list_subscriptions(client: ClientDep) -> list[SubscriptionOut]:
    """Every subscription, oldest first (webhook secrets masked)."""
    return [subscription_out(sub) for sub in await client.list_subscriptions()]


@router.get(
    "/subscriptions/{subscription_id}",
    response_model=SubscriptionOut,
    responses=problem_responses(404),
)
async def get_subscription(subscription_id: SubscriptionId, client: ClientDep) -> SubscriptionOut:
    """One subscription (webhook secret masked)."""
    return subscription_out(await _get(client, subscription_id))


@router.post(
    "/subscriptions/{subscription_id}/pause",
    response_model=SubscriptionOut,
    responses=problem_responses(404),
)
async def pause(subscription_id: SubscriptionId, client: ClientDep) -> SubscriptionOut:
    """Stop delivering to this subscription until it is resumed."""
    return subscription_out(await client.pause_subscription(subscription_id))


@router.post(
    "/subscriptions/{subscription_id}/resume",
    response_model=SubscriptionOut,
    responses=problem_responses(404),
)
async def resume(subscription_id: SubscriptionId, client: ClientDep) -> SubscriptionOut:
    """Deliver to a paused or disabled subscription again."""
    return subscription_out(await client.resume_subscription(subscription_id))


@router.delete(
    "/subscriptions/{subscription_id}", status_code=204, responses=problem_responses(404)
)
async def unsubscribe(subscription_id: SubscriptionId, client: ClientDep) -> Response:
    """Delete a subscription."""
    if not await client.unsubscribe(subscription_id):
        raise ProblemError(404, f"no subscription {subscription_id}")
    return Response(status_code=204)
