"""Request dependencies shared by the route modules: the client, bearer auth, paging limits.

Auth compares the presented bearer token with every configured token in constant time
(`hmac.compare_digest`); with no tokens configured auth is off (and `ripple serve` then binds to
loopback only).
"""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from typing import Annotated, Final

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ripple.platform.access.actors import Actor, acting_as
from ripple.platform.api.models import UUID_PATTERN
from ripple.platform.api.problems import ProblemError
from ripple.platform.api.results import check_page_size
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.ids import new_id

__all__ = [
    "ClientDep",
    "Limit",
    "UuidPath",
    "get_client",
    "page_limit",
    "request_id",
    "require_token",
]

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ripple"'}
#: Longest `X-Request-Id` kept as the request's id (a longer one is replaced).
_MAX_REQUEST_ID: Final = 128
_bearer = HTTPBearer(auto_error=False, description="A token listed in RIPPLE_API_TOKENS.")


# Dependencies that do no I/O are `async def` all the same: FastAPI runs a plain `def`
# dependency in its thread pool, a thread hop on every request.
async def get_client(request: Request) -> Client:
    """The connected `Client` the app serves."""
    client: Client = request.app.state.client
    return client


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def token_valid(presented: str, tokens: list[str]) -> bool:
    """True if `presented` equals one of `tokens`; compares against all, in constant time."""
    ok = False
    for token in tokens:
        ok |= hmac.compare_digest(presented.encode(), token.encode())
    return ok


def request_id(request: Request) -> str:
    """The request's id for audit rows: its `X-Request-Id` when short and printable, else new."""
    given = request.headers.get("x-request-id")
    if given and len(given) <= _MAX_REQUEST_ID and given.isprintable():
        return given
    return new_id()


async def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> AsyncIterator[None]:
    """Refuse the request with 401 unless it carries a configured bearer token; the request
    then acts as that token (`env` for RIPPLE_API_TOKENS) for audit rows."""
    tokens = _settings(request).api_tokens
    if not tokens:
        yield
        return
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ProblemError(
            401,
            "send `Authorization: Bearer <token>` with a RIPPLE_API_TOKENS token",
            headers=_CHALLENGE,
        )
    if not token_valid(credentials.credentials, tokens):
        raise ProblemError(
            401, "the bearer token is not one of RIPPLE_API_TOKENS", headers=_CHALLENGE
        )
    with acting_as(Actor(name="env", request_id=request_id(request))):
        yield


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
