"""The asyncpg pool, transactions, JSON codecs, and the one place driver errors are mapped.

Owns connections only: it knows no table. No other module catches asyncpg exceptions; they
call `map_errors()` (or use `transaction()`, which does) and handle `RippleError`s.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import TYPE_CHECKING, Any, Final, TypeAlias

import asyncpg
import asyncpg.pool

from ripple.platform.core.config import Settings
from ripple.platform.core.deadlines import GRACE, detach, timed_out
from ripple.platform.core.logs import Repeats, get_logger
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
    "dead_peer_options",
    "dumps",
    "loads",
    "map_errors",
    "pooled",
    "quiet_driver_noise",
    "transaction",
]

log = get_logger("ripple.db")

Pool: TypeAlias = "asyncpg.Pool[asyncpg.Record]"
#: A connection, whether acquired from the pool (a proxy) or opened directly.
Connection: TypeAlias = (
    "asyncpg.Connection[asyncpg.Record] | asyncpg.pool.PoolConnectionProxy[asyncpg.Record]"
)


# Built once: json.dumps with options builds an encoder per call.
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
# json.loads without its per-call wrappers (the documented raw_decode): a queue receive decodes
# one body per message.
_DECODER: Final = json.JSONDecoder()


def dumps(value: Any) -> str:
    """Compact JSON text, the encoding of every json/jsonb parameter."""
    return _COMPACT.encode(value)


def loads(text: str) -> Any:
    """`json.loads(text)` for the JSON text Postgres returns (the decoder of json/jsonb)."""
    try:
        value, end = _DECODER.raw_decode(text)
    except json.JSONDecodeError:
        return json.loads(text)  # leading whitespace (a json column), or the usual error
    if end != len(text):
        return json.loads(text)  # trailing whitespace, or the usual error
    return value


async def init_connection(conn: Connection) -> None:
    """Make json/jsonb parameters and results plain Python values."""
    for typename in ("json", "jsonb"):
        await conn.set_type_codec(
            typename, encoder=dumps, decoder=loads, schema="pg_catalog", format="text"
        )


#: Array types Ripple's statements bind or return; asyncpg introspects them (a catalog query)
#: the first time a connection meets them.
_ARRAY_TYPES: Final = ("int4", "int8", "float8", "text", "uuid", "jsonb", "bool", "timestamptz")
_WARM_TYPES: Final = "SELECT " + ", ".join(
    f"${n}::{name}[]" for n, name in enumerate(_ARRAY_TYPES, start=1)
)


async def init_pooled_connection(conn: Connection) -> None:
    """`init_connection` for a connection through a transaction-mode pooler, which also
    introspects the array types up front, in one transaction with `SET LOCAL jit = off`.

    asyncpg turns JIT off around its type introspection query with session-level statements;
    through the pooler those land on other server connections, so the query runs with JIT on
    (seconds on a busy server, holding a server connection all along: a small pool then
    starves and statements time out). In one transaction they all stay on one server.
    """
    await init_connection(conn)
    async with conn.transaction():
        await conn.execute("SET LOCAL jit = off")
        await conn.fetchrow(_WARM_TYPES, *([None] * len(_ARRAY_TYPES)))


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


def _hosts(url: str) -> list[str]:
    """The single-host URLs of a multi-host `url` (`postgresql://u@h1:5432,h2:5432/db?...`),
    in order; `[url]` when it names one host."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    auth, at, hosts = netloc.rpartition("@")
    if not sep or "," not in hosts:
        return [url]
    return [f"{scheme}://{auth}{at}{host}{slash}{tail}" for host in hosts.split(",")]


#: Per multi-host URL, the host that last accepted a connection: tried first next time.
_last_good: dict[str, str] = {}

#: Keepalive probes sent before an unanswered connection is given up (where the platform has
#: no TCP_USER_TIMEOUT to decide it).
_KEEPALIVE_PROBES: Final = 3


def dead_peer_options(within: float) -> list[tuple[int, int, int]]:
    """The `(level, option, value)` socket options that make the kernel drop a TCP connection
    whose peer stopped answering (a black-holed host: packets dropped, not refused) `within`
    seconds, idle or not: keepalive probes after `within / 2` idle, then every `within / 6`;
    TCP_USER_TIMEOUT (Linux) caps how long sent data or probes may go unacknowledged.

    Without them an idle connection (a pooled one, a worker's claim connection between polls)
    to a vanished primary looks open for the kernel's default of over two hours, and the first
    statement on it waits out its whole timeout. Options the platform lacks are left out.
    """
    whole = max(1, int(within))
    wanted = [
        ("SO_KEEPALIVE", socket.SOL_SOCKET, 1),
        ("TCP_KEEPIDLE", socket.IPPROTO_TCP, max(1, whole // 2)),
        ("TCP_KEEPINTVL", socket.IPPROTO_TCP, max(1, whole // 6)),
        ("TCP_KEEPCNT", socket.IPPROTO_TCP, _KEEPALIVE_PROBES),
        ("TCP_USER_TIMEOUT", socket.IPPROTO_TCP, max(1000, int(within * 1000))),
    ]
    return [(level, getattr(socket, name), v) for name, level, v in wanted if hasattr(socket, name)]


def _detect_dead_peer(conn: asyncpg.Connection[asyncpg.Record], within: float) -> None:
    """Apply `dead_peer_options(within)` to `conn`'s socket (a TCP one; a Unix socket has no
    silent peer)."""
    sock = conn._transport.get_extra_info("socket")  # type: ignore[attr-defined]
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    for level, option, value in dead_peer_options(within):
        sock.setsockopt(level, option, value)


async def _connect_each(
    dsn: str, *, timeout: float = 60.0, dead_peer_after: float | None = None, **kwargs: Any
) -> asyncpg.Connection[asyncpg.Record]:
    """`asyncpg.connect` to a multi-host `dsn`, the host that answered last time first, the
    next one tried beside it whenever a host has not answered within `STAGGER` seconds; with
    `dead_peer_after`, the connection is dropped by the kernel once its host stops answering
    that long (`dead_peer_options`).

    asyncpg spends the whole timeout on the first host that does not answer: a primary whose
    packets are dropped would keep every process from ever reaching the promoted standby.
    """
    conn = await _connect_host(dsn, timeout=timeout, **kwargs)
    if dead_peer_after is not None:
        try:
            _detect_dead_peer(conn, dead_peer_after)
        except BaseException:
            conn.terminate()
            raise
    return conn


async def _connect_host(
    dsn: str, *, timeout: float, **kwargs: Any
) -> asyncpg.Connection[asyncpg.Record]:
    """The connection of `_connect_each`, before its socket options.

    Hosts are tried in turn, the one that answered last time first, each given `STAGGER`
    seconds before the next is tried beside it: after a failover the last good host is the
    old primary, and one that no longer answers costs that delay, not the timeout."""
    hosts = _hosts(dsn)
    if len(hosts) == 1:
        return await asyncpg.connect(dsn, timeout=timeout, **kwargs)
    last = _last_good.get(dsn)
    if last in hosts:
        hosts.remove(last)
        hosts.insert(0, last)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    trying: dict[asyncio.Task[asyncpg.Connection[asyncpg.Record]], str] = {}
    error: BaseException | None = None
    try:
        while hosts or trying:
            if hosts:
                host = hosts.pop(0)
                left = max(deadline - loop.time(), 0.001)
                trying[asyncio.ensure_future(asyncpg.connect(host, timeout=left, **kwargs))] = host
            left = deadline - loop.time()
            if left <= 0:
                raise error or TimeoutError(f"no host of the database URL answered in {timeout} s")
            done, _ = await asyncio.wait(
                trying,
                timeout=min(STAGGER, left) if hosts else left,
                return_when=asyncio.FIRST_COMPLETED,
            )
            for task in done:
                host = trying.pop(task)
                exc = task.exception()
                if exc is None:
                    _last_good[dsn] = host
                    return task.result()
                if not isinstance(exc, _HOST_ERRORS):
                    raise exc
                error = exc  # down, unreachable, in recovery or not writable: the next host
        assert error is not None
        raise error
    finally:
        for task in trying:
            task.add_done_callback(_close_unused)
            task.cancel()


#: A host's connection attempt failing with one of these moves on to the next host.
_HOST_ERRORS: Final = (
    OSError,
    TimeoutError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncpg.InternalClientError,
)
#: Seconds a host of a multi-host URL has to answer before the next one is tried beside it.
STAGGER: Final = 0.5


def _close_unused(task: asyncio.Task[asyncpg.Connection[asyncpg.Record]]) -> None:
    """A connection attempt no longer needed: close what it made, if it got that far."""
    if not task.cancelled() and task.exception() is None:
        task.result().terminate()


def pooled(settings: Settings) -> bool:
    """Whether `database_url` (and the read URL) go through a transaction-mode pooler."""
    return settings.database_pooler == "transaction"


def _pooler_options(settings: Settings, direct: bool) -> dict[str, Any]:
    """Connect options for a connection through a transaction-mode pooler: the server
    connection may change at every transaction, so a named prepared statement made on one is
    missing on the next (asyncpg's statement cache would fail with "prepared statement
    __asyncpg_stmt_N__ does not exist"). With the cache off asyncpg uses the unnamed
    statement, parsed and executed in one exchange."""
    if direct or not pooled(settings):
        return {}
    return {"statement_cache_size": 0, "init": init_pooled_connection}


if TYPE_CHECKING:
    _AsyncpgPool = asyncpg.Pool[asyncpg.Record]
    _AcquireContext = asyncpg.pool.PoolAcquireContext[asyncpg.Record]
else:
    _AsyncpgPool = asyncpg.Pool
    _AcquireContext = asyncpg.pool.PoolAcquireContext


class _Acquired(_AcquireContext):
    """`pool.acquire()` whose connection, after a statement that timed out or was cancelled,
    goes back to the pool in the background once `GRACE` has passed: asyncpg hands it back
    only when the server acknowledges the cancel request, which a frozen server never does
    before it resumes. A live server acknowledges within the grace, so the statement is
    cancelled before its caller hears of it."""

    __slots__ = ()

    async def __aexit__(self, *exc: object) -> None:
        if not isinstance(exc[1], TimeoutError | asyncio.CancelledError):
            await super().__aexit__(*exc)
            return
        release = asyncio.ensure_future(super().__aexit__(*exc))
        try:
            done, _ = await asyncio.wait((release,), timeout=GRACE)
        except BaseException:  # cancelled (again) meanwhile: the hand-back goes on regardless
            detach(release)
            raise
        if done:
            release.result()
        else:
            detach(release)


class _BoundedPool(_AsyncpgPool):
    """An asyncpg pool whose `acquire` gives up after the pool's statement bound by default
    (asyncpg's `command_timeout` does not cover the wait for a free connection, which lasts as
    long as an outage when every connection is stuck in a statement), and does not hold its
    caller while a timed-out statement's cancel goes unacknowledged (`_Acquired`)."""

    __slots__ = ("_acquire_timeout",)
    _acquire_timeout: float | None

    def acquire(
        self, *, timeout: float | None = None
    ) -> asyncpg.pool.PoolAcquireContext[asyncpg.Record]:
        return _Acquired(self, self._acquire_timeout if timeout is None else timeout)


async def create_pool(
    settings: Settings, *, dsn: str | None = None, direct: bool = False, **kwargs: Any
) -> Pool:
    """Open a pool to `dsn` (default `settings.database_url`) with Ripple's codecs.

    Connects, waits for a free connection and statements time out after `settings.db_timeout`
    (RIPPLE_DB_TIMEOUT) seconds: in a database outage a call fails with `Unavailable` instead
    of hanging. `command_timeout` (a keyword argument) overrides the statement and connection
    wait bound (workers: `worker_db_timeout`). Unless `direct` (a pool on
    `database_direct_url`), a pool behind a transaction-mode pooler
    (`RIPPLE_DATABASE_POOLER=transaction`) keeps no prepared statements.
    """
    url = _database_url(settings, dsn)
    quiet_driver_noise()
    command_timeout = kwargs.pop("command_timeout", settings.db_timeout)
    with map_errors():
        options: dict[str, Any] = {
            "min_size": min(settings.pool_min_size, settings.pool_max_size),
            "max_size": settings.pool_max_size,
            "init": init_connection,
            # Statement cache stays on (unless pooled): the hot statements are few and fixed.
            # application_name is the one startup parameter PgBouncer forwards.
            "server_settings": {"application_name": "ripple"},
            "timeout": settings.db_timeout,
            "command_timeout": command_timeout,
            "reset": _release_reset,
            # Every connection of every pool notices a silent host within the lease.
            "connect": functools.partial(_connect_each, dead_peer_after=settings.lease_seconds),
            **_pooler_options(settings, direct),
            **kwargs,
        }
        # What asyncpg.create_pool does (a pool of its keyword defaults updated by the
        # options), with the bounded wait for a connection.
        defaults = asyncpg.create_pool.__kwdefaults__ or {}
        opening = _BoundedPool(url, **{**defaults, **options})
        opening._acquire_timeout = command_timeout
        pool: Pool = await opening
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

_DRIVER_ERRORS: Final = (asyncpg.PostgresConnectionError, asyncpg.InterfaceError, OSError)
_FLOOR_MESSAGE: Final = "Failed to restore the pool connection floor"
_UNRETRIEVED: Final = "Future exception was never retrieved"

_repeats = Repeats(log)


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
    `discard()`s it, the next `get()` reconnects.

    The settings are startup parameters on a direct connection. A transaction-mode pooler
    refuses startup parameters other than `application_name` (and would not keep them: the
    server connection changes between transactions), so there each unit of work runs inside
    `scoped()`: one transaction that begins with `SET LOCAL` of each setting.
    """

    def __init__(self, settings: Settings, **server_settings: str) -> None:
        self._settings = settings
        self._server_settings = {"application_name": "ripple", **server_settings}
        self._pooled = pooled(settings)
        # Behind a pooler statements are unnamed (no statement cache), so a plan cache mode
        # has nothing to act on and is not sent.
        self._local = {
            k: v
            for k, v in server_settings.items()
            if k not in ("application_name", "plan_cache_mode")
        }
        self._conn: asyncpg.Connection[asyncpg.Record] | None = None

    async def get(self) -> asyncpg.Connection[asyncpg.Record]:
        """The open connection (connecting if needed); driver errors are mapped."""
        if self._conn is None or self._conn.is_closed():
            startup = self._server_settings
            if self._pooled:
                startup = {"application_name": startup["application_name"]}
            with map_errors():
                # Bounded like the worker's pool: a statement on a connection to a host that
                # drops packets would otherwise wait for an answer forever.
                bound = worker_db_timeout(self._settings)
                conn: asyncpg.Connection[asyncpg.Record] = await _connect_each(
                    _database_url(self._settings),
                    timeout=bound,
                    dead_peer_after=self._settings.lease_seconds,
                    command_timeout=bound,
                    server_settings=startup,
                    statement_cache_size=0 if self._pooled else 100,
                )
                try:
                    await (init_pooled_connection if self._pooled else init_connection)(conn)
                except BaseException:
                    conn.terminate()
                    raise
            self._conn = conn
        return self._conn

    @asynccontextmanager
    async def scoped(self, conn: Connection) -> AsyncIterator[None]:
        """Statements on `conn` inside this block see the session settings: nothing to do on
        a direct connection; behind a transaction-mode pooler, one transaction opened with
        `SET LOCAL` of each (2 extra round trips: BEGIN + SET, and COMMIT)."""
        if not self._pooled or not self._local:
            yield
            return
        async with conn.transaction():
            for name, value in self._local.items():
                # set_config(name, value, is_local) is SET LOCAL with parameters.
                await conn.execute("SELECT set_config($1, $2, true)", name, value)
            yield

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
        raise timed_out() from exc
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
    except asyncpg.InternalClientError as exc:
        # The driver's protocol state is off: a server that shuts down sends each idle
        # connection an unsolicited FATAL error before closing it, and a statement sent in
        # between finds the connection "busy". Transient: a new connection will do.
        raise Unavailable(
            f"database connection broken ({exc}); retry: a new connection is opened"
        ) from exc
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
        async with pool.acquire() as acquired:
            try:
                async with acquired.transaction():
                    yield acquired
            except asyncpg.InternalClientError:
                acquired.terminate()  # broken (see map_errors): the pool must not hand it out
                raise
