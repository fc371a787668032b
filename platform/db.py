"""The asyncpg pool, transactions, JSON codecs, and the one place driver errors are mapped.

Owns connections only: it knows no table. No other module catches asyncpg exceptions; they
call `map_errors()` (or use `transaction()`, which does) and handle `RippleError`s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import Any, Final, TypeAlias

import asyncpg
import asyncpg.pool
import structlog

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
    "quiet_driver_noise",
    "transaction",
]

log = structlog.get_logger("ripple.db")

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
    """Open a pool to `dsn` (default `settings.database_url`) with Ripple's codecs.

    Connects and statements time out after `settings.db_timeout` (RIPPLE_DB_TIMEOUT) seconds:
    in a database outage a call fails with `Unavailable` instead of hanging. `command_timeout`
    (a keyword argument) overrides the statement bound (workers: `worker_db_timeout`).
    """
    url = _database_url(settings, dsn)
    quiet_driver_noise()
    command_timeout = kwargs.pop("command_timeout", settings.db_timeout)
    with map_errors():
        pool: Pool = await asyncpg.create_pool(
            url,
            min_size=min(settings.pool_min_size, settings.pool_max_size),
            max_size=settings.pool_max_size,
            init=init_connection,
            # Statement cache stays on: the hot statements are few and fixed.
            server_settings={"application_name": "ripple"},
            timeout=settings.db_timeout,
            command_timeout=command_timeout,
            **{"reset": _release_reset, **kwargs},
        )
    return pool


def worker_db_timeout(settings: Settings) -> float:
    """Seconds a worker's statements may take: RIPPLE_WORKER_DB_TIMEOUT, else the lease.

    Not RIPPLE_DB_TIMEOUT: that bounds API calls (fail fast, answer 503). A worker's journal
    commit or heartbeat that waits longer but within the lease is healthy; cancelling it would
    lose a recorded step (executed again) or the lease itself.
    """
    if settings.worker_db_timeout is not None:
        return settings.worker_db_timeout
    return settings.lease_seconds


# -- driver noise during outages -----------------------------------------------------------
# In a database outage asyncpg logs "Failed to restore the pool connection floor" with a
# traceback on every reconnect attempt, and futures it fails in `connection_lost` that nobody
# awaits reach asyncio's "Future exception was never retrieved" handler, also with a traceback.
# Both become one structured warning each (then at most one a minute, counting the rest).

#: Seconds during which repeats of a driver warning are counted instead of logged.
_REPEAT_WINDOW: Final = 60.0
_DRIVER_ERRORS: Final = (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, OSError)
_FLOOR_MESSAGE: Final = "Failed to restore the pool connection floor"
_UNRETRIEVED: Final = "Future exception was never retrieved"


class _Repeats:
    """Per warning kind: when it was last logged, and how many repeats were not logged since."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._count: dict[str, int] = {}

    def warn(self, event: str, exc: BaseException | None) -> None:
        now = time.monotonic()
        last = self._last.get(event)
        if last is not None and now - last < _REPEAT_WINDOW:
            self._count[event] = self._count.get(event, 0) + 1
            return
        self._last[event] = now
        repeats = self._count.pop(event, 0)
        error = "unknown" if exc is None else f"{type(exc).__name__}: {exc}"
        log.warning(event, error=error, repeats_since_last=repeats)


_repeats = _Repeats()


class _FloorFilter(logging.Filter):
    """Turns asyncpg's reconnect-failure log record into `db_pool_reconnect_failed`."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.getMessage().startswith(_FLOOR_MESSAGE):
            return True
        exc = record.exc_info[1] if record.exc_info else None
        _repeats.warn("db_pool_reconnect_failed", exc)
        return False


def _exception_handler(previous: Any) -> Any:
    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if str(context.get("message", "")).startswith(_UNRETRIEVED) and isinstance(
            exc, _DRIVER_ERRORS
        ):
            _repeats.warn("db_connection_lost", exc)
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    handle.ripple_quiet = True  # type: ignore[attr-defined]
    return handle


def quiet_driver_noise() -> None:
    """Replace asyncpg's outage tracebacks by structured warnings (idempotent; needs a running
    loop for the loop's exception handler, which wraps any handler already set)."""
    pool_logger = logging.getLogger("asyncpg.pool")
    if not any(isinstance(f, _FloorFilter) for f in pool_logger.filters):
        pool_logger.addFilter(_FloorFilter())
    loop = asyncio.get_running_loop()
    current = loop.get_exception_handler()
    if not getattr(current, "ripple_quiet", False):
        loop.set_exception_handler(_exception_handler(current))


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
    except TimeoutError as exc:  # a connect or statement past RIPPLE_DB_TIMEOUT
        raise Unavailable(
            "the database did not answer within RIPPLE_DB_TIMEOUT; the outcome is unknown: "
            "retry (with the same idempotency key)"
        ) from exc
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
