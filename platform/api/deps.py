"""Request dependencies shared by the route modules: the client, bearer auth, paging limits.

Auth compares the presented bearer token with every configured token in constant time
(`hmac.compare_digest`); with no tokens configured auth is off (and `ripple serve` then binds to
loopback only).
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Path, Query, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ripple.platform.api.models import UUID_PATTERN
from ripple.platform.api.problems import ProblemError
from ripple.platform.api.results import check_page_size
from ripple.platform.client import Client
from ripple.platform.core.config import Settings

__all__ = ["ClientDep", "Limit", "UuidPath", "get_client", "page_limit", "require_token"]

_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ripple"'}
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


async def require_token(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> None:
    """Refuse the request with 401 unless it carries a configured bearer token."""
    tokens = _settings(request).api_tokens
    if not tokens:
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
