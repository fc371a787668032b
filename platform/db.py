"""The asyncpg pool, transactions, JSON codecs, and the one place driver errors are mapped.

Owns connections only: it knows no table. No other module catches asyncpg exceptions; they
call `map_errors()` (or use `transaction()`, which does) and handle `RippleError`s.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, TypeAlias

import asyncpg
import asyncpg.pool

from ripple.platform.config import Settings
from ripple.platform.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    RippleError,
    StorageError,
    Unavailable,
)

__all__ = [
    "Connection",
    "DedicatedConnection",
    "Pool",
    "create_pool",
    "dumps",
    "map_errors",
    "transaction",
]

Pool: TypeAlias = "asyncpg.Pool[asyncpg.Record]"
#: A connection, whether acquired from the pool (a proxy) or opened directly.
Connection: TypeAlias = (
    "asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
)


def dumps(value: Any) -> str:
    """Compact JSON text, the encoding of every json/jsonb parameter."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


async def init_connection(conn: Connection) -> None:
    """Make json/jsonb parameters and results plain Python values."""
    for typename in ("json", "jsonb"):
        await conn.set_type_codec(
            typename, encoder=dumps, decoder=json.loads, schema="pg_catalog", format="text"
        )


async def _release_reset(conn: Connection) -> None:
    """What a connection needs when it returns to the pool, beyond asyncpg's own rollback of an
    open transaction: nothing. asyncpg's default reset runs `pg_advisory_unlock_all(); CLOSE
    ALL; UNLISTEN *; RESET ALL` on every release, one extra round trip per pooled statement;
    Ripple leaves no session state behind (no LISTEN, no SET; the migration lock is released
    explicitly)."""


def _database_url(settings: Settings, dsn: str | None = None) -> str:
    url = dsn or settings.database_url
    if url is None:
        raise Unavailable(
            "no database configured: set RIPPLE_DATABASE_URL, or run `ripple dev` for an "
            "embedded Postgres"
        )
    return url


async def create_pool(settings: Settings, *, dsn: str | None = None, **kwargs: Any) -> Pool:
    """Open a pool to `dsn` (default `settings.database_url`) with Ripple's codecs."""
    url = _database_url(settings, dsn)
    with map_errors():
        pool: Pool = await asyncpg.create_pool(
            url,
            min_size=min(settings.pool_min_size, settings.pool_max_size),
            max_size=settings.pool_max_size,
            init=init_connection,
            # Statement cache stays on: the hot statements are few and fixed.
            server_settings={"application_name": "ripple"},
            **{"reset": _release_reset, **kwargs},
        )
    return pool


class DedicatedConnection:
    """One connection held for a sequential loop (a worker's claims): no pool hand-off per
    statement, and session settings of its own. Opened on first use; after a failure that
    `discard()`s it, the next `get()` reconnects."""

    def __init__(self, settings: Settings, **server_settings: str) -> None:
        self._settings = settings
        self._server_settings = {"application_name": "ripple", **server_settings}
        self._conn: asyncpg.Connection[asyncpg.Record] | None = None

    async def get(self) -> asyncpg.Connection[asyncpg.Record]:
        """The open connection (connecting if needed); driver errors are mapped."""
        if self._conn is None or self._conn.is_closed():
            with map_errors():
                conn: asyncpg.Connection[asyncpg.Record] = await asyncpg.connect(
                    _database_url(self._settings), server_settings=self._server_settings
                )
                try:
                    await init_connection(conn)
                except BaseException:
                    conn.terminate()
                    raise
            self._conn = conn
        return self._conn

    def discard(self) -> None:
        """Drop the connection after an error (it may be broken or mid-transaction)."""
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            with suppress(Exception):
                await conn.close(timeout=2)


@contextmanager
def map_errors() -> Iterator[None]:
    """Re-raise driver errors as the project's error tree, with the cause chained."""
    try:
        yield
    except RippleError:
        raise
    except asyncpg.UniqueViolationError as exc:
        raise Conflict(
            f"already exists ({exc.constraint_name})", constraint=exc.constraint_name
        ) from exc
    except asyncpg.ForeignKeyViolationError as exc:
        raise NotFound(f"referenced row does not exist ({exc.constraint_name})") from exc
    except (asyncpg.CheckViolationError, asyncpg.NotNullViolationError) as exc:
        raise InvalidInput(str(exc)) from exc
    except (asyncpg.DataError, asyncpg.InvalidTextRepresentationError) as exc:
        raise InvalidInput(str(exc)) from exc
    except (
        asyncpg.CannotConnectNowError,
        asyncpg.ConnectionDoesNotExistError,
        asyncpg.TooManyConnectionsError,
        asyncpg.InterfaceError,
        ConnectionError,
        OSError,
    ) as exc:
        raise Unavailable(f"database unavailable: {exc}") from exc
    except asyncpg.PostgresError as exc:
        raise StorageError(f"database error: {exc}") from exc


@asynccontextmanager
async def transaction(pool: Pool, conn: Connection | None = None) -> AsyncIterator[Connection]:
    """Yield a connection inside one transaction; errors are mapped, rollback is automatic.

    With `conn` given, the caller's connection is used: inside the caller's transaction when one
    is open (a savepoint joins it), else in a new one. This is how work composes into a single
    commit (transactional outbox).
    """
    with map_errors():
        if conn is not None:
            async with conn.transaction():
                yield conn
            return
        async with pool.acquire() as acquired, acquired.transaction():
            yield acquired
