"""`GET /asyncapi.json`: the AsyncAPI 3.0.0 document of the typed topics (bearer token required
when tokens are configured)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from ripple.platform.api.deps import ClientDep, require_token
from ripple.platform.events.contracts.asyncapi import build_asyncapi

__all__ = ["router"]

router = APIRouter(tags=["contracts"])


@router.get(
    "/asyncapi.json",
    dependencies=[Depends(require_token)],
    responses={200: {"description": "An AsyncAPI 3.0.0 document"}},
)
async def asyncapi(request: Request, client: ClientDep) -> dict[str, Any]:
    """A channel per topic that has a schema (address = topic, message payload = its latest
    schema), `send` operations for publishing and `receive` operations per subscription kind."""
    return build_asyncapi(
        await client.topics.latest_schemas(),
        await client.list_subscriptions(),
        host=request.headers.get("host"),
    )
