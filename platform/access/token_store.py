"""The API tokens' SQL (`ripple_tokens`, migration 0021). Every function takes a connection
so callers compose one transaction (a token change and its audit row commit together)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from asyncpg import Record

from ripple.platform.core.db import Connection

__all__ = [
    "TokenRow",
    "insert_token",
    "list_tokens",
    "revoke_token",
    "token_by_id",
    "touch_token",
]


# $1 id, $2 name, $3 scopes, $4 secret_hash, $5 expires_at, $6 rate_limit, $7 rate_per
_INSERT: Final = """
INSERT INTO ripple_tokens (id, name, scopes, secret_hash, expires_at, rate_limit, rate_per)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id, name, scopes, created_at, expires_at, revoked_at, last_used_at, rate_limit, rate_per
"""

# (no parameters) every token, oldest first
_LIST: Final = """
SELECT id, name, scopes, created_at, expires_at, revoked_at, last_used_at, rate_limit, rate_per
FROM ripple_tokens ORDER BY created_at, id
"""

# $1 id
_BY_ID: Final = """
SELECT id, name, scopes, created_at, expires_at, revoked_at, last_used_at, rate_limit, rate_per
FROM ripple_tokens WHERE id = $1
"""

# $1 id: revoke an active token; no row when it was revoked already or does not exist
_REVOKE: Final = """
UPDATE ripple_tokens SET revoked_at = now()
WHERE id = $1 AND revoked_at IS NULL
RETURNING id, name, scopes, created_at, expires_at, revoked_at, last_used_at, rate_limit, rate_per
"""

# $1 secret_hash: the token a presented secret names, marking it used now (the API calls this
# when it loads or reloads its cached copy, so `last_used_at` is written once per reload, not
# per request). A revoked or expired token is returned as it is, unmarked.
_TOUCH: Final = """
UPDATE ripple_tokens
SET last_used_at = CASE
    WHEN revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()) THEN now()
    ELSE last_used_at END
WHERE secret_hash = $1
RETURNING id, name, scopes, created_at, expires_at, revoked_at, last_used_at, rate_limit, rate_per
"""


@dataclass(frozen=True, slots=True)
class TokenRow:
    """A stored token, without its secret (only its digest is stored)."""

    id: str
    name: str
    scopes: tuple[str, ...]
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    rate_limit: int | None
    rate_per: float | None


def _row(record: Record) -> TokenRow:
    return TokenRow(
        id=str(record["id"]),
        name=record["name"],
        scopes=tuple(record["scopes"]),
        created_at=record["created_at"],
        expires_at=record["expires_at"],
        revoked_at=record["revoked_at"],
        last_used_at=record["last_used_at"],
        rate_limit=record["rate_limit"],
        rate_per=record["rate_per"],
    )


def _uuid(token_id: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(token_id)
    except ValueError:
        return None


async def insert_token(
    conn: Connection,
    *,
    token_id: uuid.UUID,
    name: str,
    scopes: list[str],
    secret_hash: bytes,
    expires_at: datetime | None,
    rate_limit: int | None,
    rate_per: float | None,
) -> TokenRow:
    """Insert a new token and return it."""
    record = await conn.fetchrow(
        _INSERT, token_id, name, scopes, secret_hash, expires_at, rate_limit, rate_per
    )
    assert record is not None
    return _row(record)


async def list_tokens(conn: Connection) -> list[TokenRow]:
    """Every token (revoked and expired ones included), oldest first."""
    return [_row(record) for record in await conn.fetch(_LIST)]


async def token_by_id(conn: Connection, token_id: str) -> TokenRow | None:
    """The token with `token_id`, or None."""
    key = _uuid(token_id)
    if key is None:
        return None
    record = await conn.fetchrow(_BY_ID, key)
    return None if record is None else _row(record)


async def revoke_token(conn: Connection, token_id: str) -> TokenRow | None:
    """Revoke the token if it is not revoked yet; the revoked row, else None."""
    key = _uuid(token_id)
    if key is None:
        return None
    record = await conn.fetchrow(_REVOKE, key)
    return None if record is None else _row(record)


async def touch_token(conn: Connection, secret_hash: bytes) -> TokenRow | None:
    """The token whose secret has `secret_hash` (marked used if active), or None."""
    record = await conn.fetchrow(_TOUCH, secret_hash)
    return None if record is None else _row(record)
