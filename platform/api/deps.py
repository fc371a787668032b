"""Request dependencies shared by the route modules: the client, bearer auth, paging limits.

Auth (`ripple.platform.api.access`) compares the presented bearer token with every
RIPPLE_API_TOKENS token in constant time and looks stored tokens up by digest, then checks the
route's scope and the token's rate limit; the route runs as the token's actor. With no
RIPPLE_API_TOKENS configured a request without a token is allowed (and `ripple serve` then binds
to loopback only); a presented token is checked all the same.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ripple.platform.access.actors import acting_as
from ripple.platform.api.access import Access, Principal, request_id, token_valid
from ripple.platform.api.models import UUID_PATTERN
from ripple.platform.api.results import check_page_size
from ripple.platform.client import Client
from ripple.platform.core.config import Settings

__all__ = [
    "ClientDep",
    "Limit",
    "UuidPath",
    "get_client",
    "page_limit",
    "require_token",
    "token_valid",
]

_bearer = HTTPBearer(
    auto_error=False,
    description="A token from `ripple tokens create` or one listed in RIPPLE_API_TOKENS.",
)


# Dependencies that do no I/O are `async def` all the same: FastAPI runs a plain `def`
# dependency in its thread pool, a thread hop on every request.
async def get_client(request: Request) -> Client:
    """The connected `Client` the app serves."""
    client: Client = request.app.state.client
    return client


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


async def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> AsyncIterator[Principal]:
    """Refuse the request (401, 403, 429) unless its token may make it; run it as the token."""
    access: Access = request.app.state.access
    secret = None
    if credentials is not None and credentials.scheme.lower() == "bearer":
        secret = credentials.credentials
    principal = await access.check(request, secret)
    with acting_as(principal.actor(request_id(request.scope["headers"]))):
        yield principal


async def page_limit(
    request: Request,
    limit: Annotated[
        int, Query(ge=1, le=10_000, description="Page size (≤ RIPPLE_MAX_PAGE_SIZE)")
    ] = 50,
) -> int:
    """The requested page size, refused with 422 above the configured maximum."""
    return check_page_size(limit, _settings(request).max_page_size)


ClientDep = Annotated[Client, Depends(get_client)]
Limit = Annotated[int, Depends(page_limit)]

#: A path segment that is a UUID (subscription and delivery ids).
UuidPath = Annotated[
    str, Path(pattern=UUID_PATTERN, description="UUID", json_schema_extra={"format": "uuid"})
]
