"""API tokens: `client.tokens` (create, list, revoke) and the API's lookup of a presented secret.

A secret is `rpl_` followed by 32 random bytes, URL-safe; it is returned once, by `create`, and
stored only as its SHA-256 digest. The secret is as random as a key, so a keyed hash (HMAC with
a server key) would add a key to manage and rotate without making the digest any harder to
reverse; passwords need slow hashes because they are guessable, these are not.

The API checks a presented token through `authenticate`, which keeps a per-process cache keyed
by digest. A revoke sends a `TokensChanged` hint that empties every process's cache; with Redis
down the cache's short time-to-live bounds how long a revoked token still passes. A reload of an
entry also records the token's `last_used_at`, so that column is written at most once per
reload, never per request.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

from ripple.platform.access import audit_store, token_store
from ripple.platform.access.rate_limits import RateLimiter
from ripple.platform.access.scopes import validate_scopes
from ripple.platform.access.token_store import TokenRow
from ripple.platform.core import db
from ripple.platform.core.db import Pool
from ripple.platform.core.ids import check_text
from ripple.platform.core.limits import RateLimit
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import CH_TOKENS, Listener, NullWaker, TokensChanged
from ripple.platform.errors import InvalidInput

__all__ = ["CACHE_SECONDS", "SECRET_PREFIX", "Token", "Tokens", "secret_digest"]

log = get_logger("ripple.tokens")

#: Every token secret starts with this.
SECRET_PREFIX: Final = "rpl_"
#: Random bytes in a secret.
_SECRET_BYTES: Final = 32
#: How long an API process trusts its cached copy of a token without a revoke hint: a revoked
#: token is refused by every process within this, with Redis down too.
CACHE_SECONDS: Final = 0.5
#: Cached digests per process (unknown ones included) before the cache starts over.
_CACHE_ENTRIES: Final = 10_000


@dataclass(frozen=True, slots=True)
class Token:
    """An API token. `secret` is set only on the object `Tokens.create` returns."""

    id: str
    name: str
    scopes: list[str]
    created_at: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    secret: str | None = field(default=None, repr=False)
    revoked_at: datetime | None = None
    rate_limit: RateLimit | None = None

    @property
    def active(self) -> bool:
        """Neither revoked nor expired."""
        return _active(self.revoked_at, self.expires_at)


def _active(revoked_at: datetime | None, expires_at: datetime | None) -> bool:
    return revoked_at is None and (expires_at is None or expires_at > datetime.now(UTC))


def _token(row: TokenRow, secret: str | None = None) -> Token:
    limit = None
    if row.rate_limit is not None and row.rate_per is not None:
        limit = RateLimit(row.rate_limit, row.rate_per)
    return Token(
        id=row.id,
        name=row.name,
        scopes=list(row.scopes),
        created_at=row.created_at,
        expires_at=row.expires_at,
        last_used_at=row.last_used_at,
        secret=secret,
        revoked_at=row.revoked_at,
        rate_limit=limit,
    )


def secret_digest(secret: str) -> bytes:
    """The stored form of a secret: its SHA-256 digest."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


class Tokens:
    """`client.tokens`: create, list and revoke API tokens; `authenticate` for the API.

    `validate_pattern` checks a `publish:` scope's topic pattern (the events layer's rule,
    injected by the client); `limiter` holds the tokens' rate limits for the API.
    """

    def __init__(
        self,
        pool: Pool,
        waker: NullWaker,
        validate_pattern: Callable[[str], object],
        limiter: RateLimiter,
    ) -> None:
        self._pool = pool
        #: The per-token rate limits the API enforces (shared through Redis).
        self.limiter = limiter
        self._waker = waker
        self._validate_pattern = validate_pattern
        self._cache: dict[bytes, tuple[float, Token | None]] = {}
        self._by_id: dict[str, tuple[float, Token | None]] = {}
        self._loading: dict[bytes, asyncio.Future[Token | None]] = {}
        self._listener: Listener | None = None
        self._listening = False
        self._exits = contextlib.AsyncExitStack()

    async def create(
        self,
        name: str,
        scopes: builtins.list[str],
        expires_in: timedelta | None = None,
        rate_limit: RateLimit | None = None,
    ) -> Token:
        """A new token with `scopes`; its `secret` is on the returned object only.

        Raises `InvalidInput` for an empty or over-long name, an unknown scope, a bad
        `publish:` pattern or a non-positive `expires_in`.
        """
        check_text(name, "name", field="name")
        checked = validate_scopes(scopes, self._validate_pattern)
        if expires_in is not None and (
            not isinstance(expires_in, timedelta) or expires_in <= timedelta(0)
        ):
            raise InvalidInput("expires_in must be a positive timedelta", field="expiresIn")
        if rate_limit is not None and not isinstance(rate_limit, RateLimit):
            raise InvalidInput("rate_limit must be a RateLimit(limit, per)", field="rateLimit")
        secret = SECRET_PREFIX + secrets.token_urlsafe(_SECRET_BYTES)
        expires_at = None if expires_in is None else datetime.now(UTC) + expires_in
        async with db.transaction(self._pool) as conn:
            row = await token_store.insert_token(
                conn,
                token_id=uuid.uuid4(),
                name=name,
                scopes=checked,
                secret_hash=secret_digest(secret),
                expires_at=expires_at,
                rate_limit=None if rate_limit is None else rate_limit.limit,
                rate_per=None if rate_limit is None else rate_limit.seconds,
            )
            details: dict[str, object] = {"name": name, "scopes": checked}
            if expires_at is not None:
                details["expiresAt"] = expires_at.isoformat()
            if rate_limit is not None:
                details["rateLimit"] = {"limit": rate_limit.limit, "perSeconds": rate_limit.seconds}
            await audit_store.record(conn, "token.create", row.id, details)
        log.info("token_created", token_id=row.id, name=name, scopes=checked)
        return _token(row, secret)

    async def list(self) -> builtins.list[Token]:
        """Every token, revoked and expired ones included, oldest first; no secrets."""
        with db.map_errors():
            async with self._pool.acquire() as conn:
                rows = await token_store.list_tokens(conn)
        return [_token(row) for row in rows]

    async def get(self, token_id: str) -> Token | None:
        """The token with `token_id` (no secret), or None."""
        with db.map_errors():
            async with self._pool.acquire() as conn:
                row = await token_store.token_by_id(conn, token_id)
        return None if row is None else _token(row)

    async def revoke(self, token_id: str) -> bool:
        """Revoke a token; True if it was active (not revoked before). Every API process
        refuses it within `CACHE_SECONDS`, at once when Redis carries the hint."""
        async with db.transaction(self._pool) as conn:
            row = await token_store.revoke_token(conn, token_id)
            if row is None:
                return False
            await audit_store.record(conn, "token.revoke", row.id, {"name": row.name})
        self._cache.clear()
        self._by_id.clear()
        self._waker.notify(TokensChanged())
        log.info("token_revoked", token_id=row.id, name=row.name)
        return row.expires_at is None or row.revoked_at is None or row.expires_at > row.revoked_at

    # -- the API's lookup ------------------------------------------------------------------

    async def authenticate(self, secret: str) -> Token | None:
        """The active token whose secret is `secret`, else None (unknown, revoked, expired).

        The same work runs for every presented string (digest, then a dictionary lookup of
        the digest), whatever its prefix.
        """
        digest = secret_digest(secret)
        await self._check_hint()
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            token = cached[1]
        else:
            token = await self._load(digest)
        if token is None or not token.active:
            return None
        return token

    async def active(self, token_id: str) -> Token | None:
        """The token with `token_id` if it is active, else None; cached as `authenticate`
        caches (a dashboard session names its token by id)."""
        await self._check_hint()
        cached = self._by_id.get(token_id)
        if cached is not None and time.monotonic() - cached[0] < CACHE_SECONDS:
            token = cached[1]
        else:
            token = await self.get(token_id)
            if len(self._by_id) >= _CACHE_ENTRIES:
                self._by_id.clear()
            self._by_id[token_id] = (time.monotonic(), token)
        return token if token is not None and token.active else None

    async def _check_hint(self) -> None:
        if not self._listening:
            self._listening = True
            self._listener = await self._exits.enter_async_context(self._waker.listen(CH_TOKENS))
        if self._listener is not None and self._listener.take():
            self._cache.clear()
            self._by_id.clear()

    async def _load(self, digest: bytes) -> Token | None:
        """Read the token of `digest` (one read per digest at a time) and cache it."""
        pending = self._loading.get(digest)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[Token | None] = asyncio.get_running_loop().create_future()
        self._loading[digest] = future
        try:
            with db.map_errors():
                async with self._pool.acquire() as conn:
                    row = await token_store.touch_token(conn, digest)
            token = None if row is None else _token(row)
            if len(self._cache) >= _CACHE_ENTRIES:
                self._cache.clear()
            self._cache[digest] = (time.monotonic(), token)
            future.set_result(token)
            return token
        except Exception as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: waiters re-raise it, no "never retrieved" warning
            raise
        except BaseException:
            future.cancel()
            raise
        finally:
            del self._loading[digest]

    async def close(self) -> None:
        """Unregister the revoke-hint listener (before the waker closes)."""
        self._listener = None
        self._listening = False
        self._cache.clear()
        await self._exits.aclose()
        await self.limiter.close()
