"""Routes for API tokens (`admin` only): create, list, revoke."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Final

from fastapi import APIRouter, Path
from pydantic import Field

from ripple.platform.access.scopes import MAX_SCOPE_LENGTH, SCOPE_PATTERN
from ripple.platform.api.deps import ClientDep
from ripple.platform.api.models import JSON_NUMBER, NO_NUL_PATTERN, ApiModel
from ripple.platform.api.problems import ProblemError, problem_responses
from ripple.platform.api.token_results import (
    CreatedToken,
    Revoked,
    TokenOut,
    created_token,
    token_out,
)
from ripple.platform.core.limits import RateLimit

__all__ = ["router"]

router = APIRouter(tags=["tokens"])

#: Longest `expiresIn` / `perSeconds` accepted (ten years, in seconds).
_MAX_SECONDS: Final = 10 * 365 * 86_400
_TokenId = Annotated[str, Path(description="Token id (UUID)", max_length=64)]


class RateLimitIn(ApiModel):
    """At most `limit` requests per `perSeconds`, across every API process."""

    limit: Annotated[int, Field(ge=1, le=1_000_000_000), JSON_NUMBER] = Field(examples=[1000])
    per_seconds: Annotated[float, Field(ge=0.001, le=_MAX_SECONDS), JSON_NUMBER] = Field(
        default=1.0, examples=[1]
    )


class TokenIn(ApiModel):
    """A new token: its name, scopes, and optionally a lifetime and a rate limit."""

    name: str = Field(min_length=1, max_length=255, pattern=NO_NUL_PATTERN, examples=["ci"])
    scopes: list[Annotated[str, Field(max_length=MAX_SCOPE_LENGTH, pattern=SCOPE_PATTERN)]] = Field(
        min_length=1,
        max_length=100,
        description="`admin`, `read`, `operate`, `publish:<pattern>`, `start:<workflow>`, "
        "`signal:<workflow>`, `queue:<name>` (`*` for any workflow or queue).",
        examples=[["publish:order.*"]],
    )
    expires_in: Annotated[float, Field(ge=1, le=_MAX_SECONDS), JSON_NUMBER] | None = Field(
        default=None, description="Lifetime in seconds (none: never expires).", examples=[86400]
    )
    rate_limit: RateLimitIn | None = None


@router.post(
    "/tokens", status_code=201, response_model=CreatedToken, responses=problem_responses(422)
)
async def create_token(body: TokenIn, client: ClientDep) -> CreatedToken:
    """Create a token; the answer holds its secret, which is not stored and never shown again."""
    limit = None
    if body.rate_limit is not None:
        limit = RateLimit(body.rate_limit.limit, body.rate_limit.per_seconds)
    expires_in = None if body.expires_in is None else timedelta(seconds=body.expires_in)
    return created_token(await client.tokens.create(body.name, body.scopes, expires_in, limit))


@router.get("/tokens", response_model=list[TokenOut])
async def list_tokens(client: ClientDep) -> list[TokenOut]:
    """Every token, revoked and expired ones included, oldest first (no secrets)."""
    return [token_out(token) for token in await client.tokens.list()]


@router.delete("/tokens/{token_id}", response_model=Revoked, responses=problem_responses(404))
async def revoke_token(token_id: _TokenId, client: ClientDep) -> Revoked:
    """Revoke a token: every API process refuses it within a second. `revoked` is false
    when it was revoked or expired already."""
    if await client.tokens.get(token_id) is None:
        raise ProblemError(404, f"no token {token_id!r}; list them with GET /v1/tokens")
    return Revoked(id=token_id, revoked=await client.tokens.revoke(token_id))
