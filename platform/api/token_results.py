"""The JSON shapes of tokens, shared by the REST routes and the CLI (no FastAPI import)."""

from __future__ import annotations

from datetime import datetime

from ripple.platform.access.tokens import Token
from ripple.platform.api.models import OutModel
from ripple.platform.core.limits import RateLimit

__all__ = ["CreatedToken", "RateLimitOut", "Revoked", "TokenOut", "created_token", "token_out"]


class RateLimitOut(OutModel):
    limit: int
    per_seconds: float


class TokenOut(OutModel):
    """A token (never its secret)."""

    id: str
    name: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None
    active: bool
    rate_limit: RateLimitOut | None


class CreatedToken(OutModel):
    """A new token with its secret, shown this once."""

    id: str
    name: str
    scopes: list[str]
    secret: str
    created_at: datetime
    expires_at: datetime | None
    rate_limit: RateLimitOut | None


class Revoked(OutModel):
    id: str
    #: True if the token was active until now.
    revoked: bool


def _limit_out(limit: RateLimit | None) -> RateLimitOut | None:
    return None if limit is None else RateLimitOut(limit=limit.limit, per_seconds=limit.seconds)


def token_out(token: Token) -> TokenOut:
    return TokenOut(
        id=token.id,
        name=token.name,
        scopes=token.scopes,
        created_at=token.created_at,
        expires_at=token.expires_at,
        last_used_at=token.last_used_at,
        revoked_at=token.revoked_at,
        active=token.active,
        rate_limit=_limit_out(token.rate_limit),
    )


def created_token(token: Token) -> CreatedToken:
    """The answer to a create: the token with its secret."""
    return CreatedToken(
        id=token.id,
        name=token.name,
        scopes=token.scopes,
        secret=token.secret or "",
        created_at=token.created_at,
        expires_at=token.expires_at,
        rate_limit=_limit_out(token.rate_limit),
    )
