"""The wake layer: small typed hints after a commit, so waiters react in milliseconds.

Redis pub/sub carries hints between processes; hints are also delivered to waiters in this
process directly. Redis holds no state and is optional at every moment: a waiter never waits
longer than the poll interval before its caller re-checks Postgres, so a lost hint (Redis down,
restarted, or dropping messages) only delays work. The Redis side reconnects and resubscribes
by itself. This module owns channel names; it must not know any table.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from ripple.platform.core.logs import Outage, get_logger

# redis is imported by the first RedisWaker: a process without RIPPLE_REDIS_URL (a CLI command
# that only reads) never loads it.
if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.asyncio.client import PubSub
    from redis.asyncio.connection import AbstractConnection

__all__ = [
    "CH_CANCELS",
    "CH_RUNS",
    "CH_SCHEDULES",
    "CH_SCHEMAS",
    "CH_TOKENS",
    "REDIS_CONNECTION_OPTIONS",
    "AnyHint",
    "DeliveriesReady",
    "Listener",
    "NullWaker",
    "QueueReady",
    "RedisConnector",
    "RedisEndpoint",
    "RedisWaker",
    "RunCanceled",
    "RunFinished",
    "RunReady",
    "SchedulesChanged",
    "SchemasChanged",
    "SubscriptionsChanged",
    "TokensChanged",
    "Waker",
    "create_waker",
    "hint_around_caller_commit",
]

log = get_logger("ripple.wake")

#: How the wake layer connects to Redis (subscriber client and publisher connection alike): a
#: second to connect, no read timeout (a subscriber waits for as long as nothing happens),
#: keepalive so a dead peer is noticed.
REDIS_CONNECTION_OPTIONS: Final[dict[str, Any]] = {
    "socket_connect_timeout": 1.0,
    "socket_timeout": None,
    "socket_keepalive": True,
}

#: Seconds between checks that the connected server is still the master Sentinel names: a
#: demoted master still accepts PUBLISH and SUBSCRIBE, so a stale connection fails silently.
_MASTER_CHECK_SECONDS = 5.0

#: Longest `RedisWaker.close()` waits for unsent hints to reach Redis.
_CLOSE_FLUSH_SECONDS = 1.0
#: Longest `listen()` waits for Redis to confirm a new channel subscription (then it polls).
_CONFIRM_SECONDS = 1.0
#: Run channels are covered by one pattern subscription per process (see RedisWaker).
_RUN_PREFIX = "run:"
_RUN_PATTERN = _RUN_PREFIX + "*"

#: Channel names, relative to the deployment's prefix.
CH_RUNS = "runs"  # some workflow run became available
CH_DELIVERIES = "deliveries"  # some webhook delivery became due
CH_SUBSCRIPTIONS = "subscriptions"  # the subscription set changed
CH_CANCELS = "cancels"  # runs were canceled (workers stop executing them)
CH_SCHEDULES = "schedules"  # a schedule was created, replaced, paused, resumed or deleted
CH_SCHEMAS = "schemas"  # a topic schema version was registered
CH_TOKENS = "tokens"  # an API token was revoked (API processes drop their cached tokens)


def run_channel(run_id: str) -> str:
    """Channel of one run's terminal hint (what `result()` waits on)."""
    return f"{_RUN_PREFIX}{run_id}"


def queue_channel(queue: str) -> str:
    """Channel of one queue's new-message hint (what long-polling receivers wait on)."""
    return f"queue:{queue}"


@dataclass(frozen=True, slots=True)
class RunReady:
    """A run is available to claim now."""

    workflow: str = ""

    @property
    def channel(self) -> str:
        return CH_RUNS


@dataclass(frozen=True, slots=True)
class RunFinished:
    """A run reached a terminal state (or changed state a result() caller cares about)."""

    run_id: str

    @property
    def channel(self) -> str:
        return run_channel(self.run_id)


@dataclass(frozen=True, slots=True)
class RunCanceled:
    """Runs were canceled; a worker executing one cancels its task."""

    run_ids: Sequence[str]

    @property
    def channel(self) -> str:
        return CH_CANCELS


@dataclass(frozen=True, slots=True)
class QueueReady:
    """A queue has messages to receive."""

    queue: str

    @property
    def channel(self) -> str:
        return queue_channel(self.queue)


@dataclass(frozen=True, slots=True)
class DeliveriesReady:
    """Webhook deliveries are due."""

    @property
    def channel(self) -> str:
        return CH_DELIVERIES


@dataclass(frozen=True, slots=True)
class SubscriptionsChanged:
    """The subscription set changed; cached copies must reload."""

    @property
    def channel(self) -> str:
        return CH_SUBSCRIPTIONS


@dataclass(frozen=True, slots=True)
class SchedulesChanged:
    """A schedule changed; schedulers re-read when the next one is due."""

    @property
    def channel(self) -> str:
        return CH_SCHEDULES


@dataclass(frozen=True, slots=True)
class SchemasChanged:
    """A topic schema version was registered; cached validators must reload."""

    @property
    def channel(self) -> str:
        return CH_SCHEMAS


@dataclass(frozen=True, slots=True)
class TokensChanged:
    """An API token was revoked; API processes drop their cached copies."""

    @property
    def channel(self) -> str:
        return CH_TOKENS


AnyHint = (
    RunReady
    | RunFinished
    | RunCanceled
    | QueueReady
    | DeliveriesReady
    | SubscriptionsChanged
    | SchedulesChanged
    | SchemasChanged
    | TokensChanged
)


class Listener:
    """A registration for hints on one channel; create it *before* checking Postgres.

    Hints that arrive between registration and `wait()` are not lost: `wait()` then returns
    at once.
    """

    __slots__ = ("_event", "_poll", "channel")

    def __init__(self, channel: str, poll_interval: float) -> None:
        self.channel = channel
        self._event = asyncio.Event()
        self._poll = poll_interval

    def poke(self) -> None:
        """Wake this listener's next (or current) `wait()` as a hint would."""
        self._event.set()

    def take(self) -> bool:
        """Whether a hint arrived since the last check (clearing it), without waiting."""
        woke = self._event.is_set()
        self._event.clear()
        return woke

    async def wait(self, timeout: float | None = None) -> bool:
        """Wait for a hint, at most `timeout` and never past the poll interval.

        Returns True if a hint arrived (then re-check Postgres), False on the poll timeout.
        """
        limit = self._poll if timeout is None else max(0.0, min(timeout, self._poll))
        if not self._event.is_set():
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that
            # races with the event being set (a stopping worker's loop then never ends).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit):
                    await self._event.wait()
        woke = self._event.is_set()
        self._event.clear()
        return woke


class Waker(Protocol):
    """What code that commits work and code that waits for it need from the wake layer."""

    poll_interval: float

    def notify(self, *hints: AnyHint) -> None:
        """Send hints after a commit. Never blocks, never raises."""

    def listen(self, channel: str) -> contextlib.AbstractAsyncContextManager[Listener]:
        """Register a listener on `channel` for the duration of the block."""

    async def start(self) -> None: ...

    async def close(self) -> None: ...


class NullWaker:
    """Hints reach waiters of this process only; other processes rely on the poll interval."""

    def __init__(self, poll_interval: float = 1.0) -> None:
        self.poll_interval = poll_interval
        self._listeners: dict[str, set[Listener]] = {}

    def _dispatch(self, channel: str) -> None:
        for listener in self._listeners.get(channel, ()):
            listener.poke()

    def _dispatch_all(self) -> None:
        for listeners in self._listeners.values():
            for listener in listeners:
                listener.poke()

    def notify(self, *hints: AnyHint) -> None:
        for hint in hints:
            self._dispatch(hint.channel)

    def _add(self, listener: Listener) -> bool:
        """Register; True if it is the channel's first listener."""
        group = self._listeners.setdefault(listener.channel, set())
        group.add(listener)
        return len(group) == 1

    def _remove(self, listener: Listener) -> bool:
        """Unregister; True if it was the channel's last listener."""
        group = self._listeners.get(listener.channel)
        if group is None:
            return False
        group.discard(listener)
        if group:
            return False
        del self._listeners[listener.channel]
        return True

    @contextlib.asynccontextmanager
    async def listen(self, channel: str) -> AsyncIterator[Listener]:
        listener = Listener(channel, self.poll_interval)
        self._add(listener)
        try:
            yield listener
        finally:
            self._remove(listener)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self._dispatch_all()


@dataclass(slots=True)
class _Request:
    """A subscription request of a RedisWaker, and the future its listener waits on."""

    command: str  # SUBSCRIBE | PSUBSCRIBE | UNSUBSCRIBE | RESUBSCRIBE (after a reconnect)
    name: str  # channel or pattern, without the prefix
    generation: int  # the connection it was made for
    confirmed: asyncio.Future[None] | None = None

    def done(self) -> None:
        if self.confirmed is not None and not self.confirmed.done():
            self.confirmed.set_result(None)


@dataclass(frozen=True, slots=True)
class RedisEndpoint:
    """Where the wake layer finds Redis: a URL, or the master a set of Sentinels names.

    Args:
        url: a redis://, rediss:// or unix:// URL (ignored when `sentinels` is given).
        sentinels: (host, port) of each Sentinel; the master is asked of them on every connect.
        master: the master's name in Sentinel (`sentinel monitor <name> ...`).
    """

    url: str | None = None
    sentinels: tuple[tuple[str, int], ...] = ()
    master: str | None = None

    def __post_init__(self) -> None:
        if self.sentinels and not self.master:
            raise ValueError("a Sentinel endpoint needs the master's name")

    @property
    def configured(self) -> bool:
        """True when there is a Redis to connect to."""
        return bool(self.url or self.sentinels)

    def describe(self) -> str:
        """For logs: the URL or the Sentinel master's name (no credentials)."""
        if self.sentinels:
            return f"sentinel master {self.master}"
        return (self.url or "").rsplit("@", 1)[-1]


class RedisConnector:
    """Makes Redis clients and pools for a `RedisEndpoint` (the waker's, the rate limiter's);
    owns the Sentinel manager's connections (closed by `close()`). The clients and pools it
    makes are their callers' to close."""

    def __init__(self, endpoint: RedisEndpoint) -> None:
        self.endpoint = endpoint
        self._sentinel: Any = None
        #: The manager's client per Sentinel, as made: its list is reordered by discoveries.
        self._sentinel_clients: list[aioredis.Redis] = []
        self._checked = 0.0
        self._master: tuple[str, int] | None = None

    def _manager(self) -> Any:
        if self._sentinel is None:
            from ripple.platform.core.redis_sentinel import SerialSentinel

            self._sentinel = SerialSentinel(
                list(self.endpoint.sentinels),
                sentinel_kwargs={"socket_connect_timeout": 1.0, "socket_timeout": 1.0},
                **REDIS_CONNECTION_OPTIONS,
            )
            self._sentinel_clients = list(self._sentinel.sentinels)
        return self._sentinel

    def client(self, **options: Any) -> aioredis.Redis:
        """A client on the URL, or on the master Sentinel names at connect time."""
        import redis.asyncio as aioredis

        if self.endpoint.sentinels:
            client: aioredis.Redis = self._manager().master_for(
                self.endpoint.master, **{**REDIS_CONNECTION_OPTIONS, **options}
            )
            return client
        return aioredis.Redis.from_url(
            self.endpoint.url or "", **{**REDIS_CONNECTION_OPTIONS, **options}
        )

    def pool(self) -> aioredis.ConnectionPool:
        """A connection pool on the URL, or on the master Sentinel names at connect time."""
        import redis.asyncio as aioredis
        from redis.asyncio.sentinel import SentinelConnectionPool

        if self.endpoint.sentinels:
            return SentinelConnectionPool(  # type: ignore[no-untyped-call]
                self.endpoint.master, self._manager(), **REDIS_CONNECTION_OPTIONS
            )
        return aioredis.ConnectionPool.from_url(self.endpoint.url or "", **REDIS_CONNECTION_OPTIONS)

    async def stale(self, conn: AbstractConnection | None) -> bool:
        """True when `conn` is on a server Sentinel no longer names as the master.

        Asks Sentinel at most every `_MASTER_CHECK_SECONDS`; never for a URL endpoint. A
        Sentinel that cannot answer leaves the connection as it is.
        """
        if not self.endpoint.sentinels or conn is None:
            return False
        now = time.monotonic()
        if now - self._checked >= _MASTER_CHECK_SECONDS:
            self._checked = now
            from redis.exceptions import RedisError

            try:
                host, port = await self._manager().discover_master(self.endpoint.master)
                self._master = (str(host), int(port))
            except (RedisError, OSError):
                return False
        connected = (getattr(conn, "host", None), getattr(conn, "port", None))
        return self._master is not None and connected != self._master

    async def close(self) -> None:
        """Close the connections to the Sentinels."""
        clients, self._sentinel_clients, self._sentinel = self._sentinel_clients, [], None
        for client in clients:
            with contextlib.suppress(Exception):
                await client.aclose()


class RedisWaker(NullWaker):
    """Hints go to waiters in this process at once and to other processes via Redis pub/sub.

    A process subscribes only to what it listens on, so a worker never parses other runs'
    completion hints: a channel is subscribed on its first listener and unsubscribed after its
    last. Run channels (`run:<id>`, what `result()` waits on) are one pattern subscription
    instead, made on the first `result()` of the process and kept, so later calls cost no Redis
    round trip. `listen()` returns once Redis confirmed the subscription (or after
    `_CONFIRM_SECONDS`, then the listener polls), so a hint published after it returned is not
    missed. One subscriber connection per process reconnects with backoff after any failure,
    resubscribes, and wakes each local listener when its resubscription is confirmed, since
    hints may have been missed meanwhile.
    A hint on the wire is its channel and the sender's id: hints carry no data. A background
    task publishes from a bounded buffer, each channel once per batch: `notify()` never waits.
    """

    def __init__(
        self,
        endpoint: RedisEndpoint | str,
        *,
        prefix: str = "ripple:",
        poll_interval: float = 1.0,
    ) -> None:
        from redis.exceptions import RedisError

        super().__init__(poll_interval)
        #: What a lost or refused Redis connection raises.
        self._failures: tuple[type[Exception], ...] = (RedisError, OSError)
        if isinstance(endpoint, str):
            endpoint = RedisEndpoint(url=endpoint)
        self._connector = RedisConnector(endpoint)
        self._prefix = prefix
        self._src = f"{os.getpid()}-{id(self):x}".encode()
        self._outbox: asyncio.Queue[AnyHint] = asyncio.Queue(maxsize=10_000)
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        #: Hints accepted by notify() and not yet sent or dropped (close() flushes them).
        self._unsent = 0
        #: The subscriber connection while it is up, and a number per connection.
        self._pubsub: PubSub | None = None
        self._generation = 0
        #: (Un)subscribe requests in call order, sent by one task so that order is kept.
        self._control: asyncio.Queue[_Request] = asyncio.Queue()
        #: Requests sent on the current connection, per subscription, awaiting Redis's reply
        #: (Redis answers each in order, so replies pair with requests first-in, first-out).
        self._sent: dict[str, collections.deque[_Request]] = {}
        #: Subscriptions Redis confirmed on this connection that no UNSUBSCRIBE is pending for.
        self._live: set[str] = set()
        #: UNSUBSCRIBE requests queued or sent and not yet answered, per channel.
        self._unsubscribing: collections.Counter[str] = collections.Counter()
        #: Patterns this process wants (kept for its lifetime).
        self._patterns: set[str] = set()
        #: True while the subscriber connection is up (for health reporting and tests).
        self.connected = asyncio.Event()
        #: Failed hint publishes while Redis is down: one warning, then a count.
        self._publish_outage = Outage(log, "wake_publish_failed", "wake_publish_recovered")

    def _client(self) -> aioredis.Redis:
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff

        # The subscriber loop is the one place this connection is (re)made: redis-py's pub/sub
        # otherwise reconnects it after any failed read or write, from whichever task made the
        # call (the control loop too, even after the loop closed this client), and the sockets
        # of those reconnects were left to the garbage collector.
        return self._connector.client(
            health_check_interval=5, retry=Retry(NoBackoff(), 0, supported_errors=())
        )

    def notify(self, *hints: AnyHint) -> None:
        super().notify(*hints)
        for hint in hints:
            with contextlib.suppress(asyncio.QueueFull):
                self._outbox.put_nowait(hint)
                self._unsent += 1

    @contextlib.asynccontextmanager
    async def listen(self, channel: str) -> AsyncIterator[Listener]:
        listener = Listener(channel, self.poll_interval)
        self._add(listener)
        try:
            await self._subscribed(channel)
            yield listener
        finally:
            last = self._remove(listener)
            if last and self._pubsub is not None and not channel.startswith(_RUN_PREFIX):
                self._unsubscribing[channel] += 1
                self._live.discard(channel)
                self._control.put_nowait(_Request("UNSUBSCRIBE", channel, self._generation))

    async def _subscribed(self, channel: str) -> None:
        """Return once Redis confirmed a subscription covering `channel`.

        Returns at once when disconnected (the reconnect subscribes every listener's channel
        and wakes them all) and after `_CONFIRM_SECONDS` at the latest (the listener polls).
        """
        if channel.startswith(_RUN_PREFIX):
            name, command = _RUN_PATTERN, "PSUBSCRIBE"
            self._patterns.add(name)
        else:
            name, command = channel, "SUBSCRIBE"
        if self._pubsub is None or (name in self._live and not self._unsubscribing[name]):
            return
        # Our own request, answered after every request queued before it: a reply to an older
        # SUBSCRIBE (which an UNSUBSCRIBE may follow) does not count.
        confirmed = asyncio.get_running_loop().create_future()
        self._control.put_nowait(_Request(command, name, self._generation, confirmed))
        try:
            async with asyncio.timeout(_CONFIRM_SECONDS):
                await confirmed
        except TimeoutError:
            log.debug("wake_subscribe_unconfirmed", subscription=name)

    async def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._subscribe_loop(), name="ripple-wake-subscriber"),
                asyncio.create_task(self._control_loop(), name="ripple-wake-control"),
                asyncio.create_task(self._publish_loop(), name="ripple-wake-publisher"),
            ]

    async def close(self) -> None:
        # Flush hints still in the outbox (briefly): a short-lived process such as a CLI command
        # otherwise exits before its publish reaches other processes' waiters.
        deadline = time.monotonic() + _CLOSE_FLUSH_SECONDS
        while self._unsent > 0 and self._tasks and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.005)
        self._closing = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        await self._connector.close()
        await super().close()

    async def _subscribe_loop(self) -> None:
        backoff = 0.05
        # A channel nobody publishes on: the connection always has a subscription.
        idle = self._prefix + "_process:" + self._src.decode()
        while not self._closing:
            client = self._client()
            pubsub = client.pubsub()
            try:
                await pubsub.subscribe(idle)
                # Listeners registered from now on subscribe themselves (through _control);
                # those registered before are in this snapshot, and are woken once Redis
                # confirms their subscription (hints may have been missed meanwhile).
                self._pubsub = pubsub
                self._generation += 1
                channels = [c for c in self._listeners if not c.startswith(_RUN_PREFIX)]
                for name in [*channels, *self._patterns]:
                    self._sent.setdefault(name, collections.deque()).append(
                        _Request("RESUBSCRIBE", name, self._generation)
                    )
                if channels:
                    await pubsub.subscribe(*(self._prefix + c for c in channels))
                if self._patterns:
                    await pubsub.psubscribe(*(self._prefix + p for p in self._patterns))
                self.connected.set()
                backoff = 0.05
                log.debug("wake_subscribed", prefix=self._prefix, channels=len(channels))
                while True:
                    # A connection a failed send closed is replaced here (resubscribing and
                    # waking listeners, as above), not reconnected by redis-py in get_message.
                    connection: AbstractConnection | None = pubsub.connection
                    if connection is None or not connection.is_connected:
                        raise ConnectionError("the subscriber connection was closed")
                    message = await pubsub.get_message(timeout=_MASTER_CHECK_SECONDS)
                    if message is not None:
                        self._receive(message)
                    elif await self._connector.stale(connection):
                        raise ConnectionError("Sentinel names another master now")
            except self._failures as exc:
                if self.connected.is_set():
                    log.warning("wake_redis_lost", error=str(exc))
            finally:
                self._disconnected()
                try:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()  # type: ignore[no-untyped-call]
                finally:  # also when close() cancels this task during the line above
                    with contextlib.suppress(Exception):
                        await client.aclose()
            if not self._closing:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)

    def _disconnected(self) -> None:
        self._pubsub = None
        self.connected.clear()
        self._live.clear()
        self._unsubscribing.clear()
        for pending in self._sent.values():
            for request in pending:
                request.done()  # don't keep listeners waiting: they poll
        self._sent.clear()

    def _receive(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        raw = message.get("channel")
        if not isinstance(raw, bytes):
            return
        name = raw.decode()[len(self._prefix) :]
        if kind in ("message", "pmessage"):
            if message.get("data") != self._src:  # our own hints were dispatched locally
                self._dispatch(name)
            return
        pending = self._sent.get(name)
        request = pending.popleft() if pending else None
        if pending is not None and not pending:
            del self._sent[name]
        if kind == "unsubscribe":
            self._live.discard(name)
            self._unsubscribing[name] -= 1
            if self._unsubscribing[name] <= 0:
                del self._unsubscribing[name]
        elif kind in ("subscribe", "psubscribe"):
            if not self._unsubscribing[name]:
                self._live.add(name)
            if request is not None:
                request.done()
                if request.command == "RESUBSCRIBE":
                    self._wake_subscribers(name)

    def _wake_subscribers(self, name: str) -> None:
        """Wake the listeners a (re)confirmed subscription `name` covers."""
        if name == _RUN_PATTERN:
            for channel in list(self._listeners):
                if channel.startswith(_RUN_PREFIX):
                    self._dispatch(channel)
        else:
            self._dispatch(name)

    async def _control_loop(self) -> None:
        """Send (un)subscribe requests in call order, each only if still wanted when sent."""
        while True:
            request = await self._control.get()
            pubsub, name = self._pubsub, request.name
            unsubscribe = request.command == "UNSUBSCRIBE"
            # A connection that failed is the subscriber loop's to replace: sending on it
            # would make redis-py connect it again behind that loop's back.
            connection: AbstractConnection | None = None if pubsub is None else pubsub.connection
            current = pubsub is not None and request.generation == self._generation
            usable = current and connection is not None and connection.is_connected
            if unsubscribe:
                wanted = name not in self._listeners
            else:
                wanted = request.command == "PSUBSCRIBE" or name in self._listeners
            if pubsub is None or not usable or not wanted:
                if unsubscribe and current:
                    self._unsubscribing[name] -= 1
                    if self._unsubscribing[name] <= 0:
                        del self._unsubscribing[name]
                request.done()
                continue
            self._sent.setdefault(name, collections.deque()).append(request)
            try:
                if request.command == "SUBSCRIBE":
                    await pubsub.subscribe(self._prefix + name)
                elif request.command == "PSUBSCRIBE":
                    await pubsub.psubscribe(self._prefix + name)
                else:
                    await pubsub.unsubscribe(self._prefix + name)
            except self._failures as exc:
                # The subscriber loop sees the broken connection and starts over.
                log.debug("wake_control_failed", error=str(exc))
                request.done()

    async def _publish_loop(self) -> None:
        # One connection of its own, driven through redis-py's connection API: a PUBLISH
        # through the client's pipeline (retry wrapper, pool checkout, timeouts, observability)
        # costs more CPU than the connection (`python -m bench.wake_hints` prints both).
        pool = self._connector.pool()
        conn: AbstractConnection | None = None
        try:
            while True:
                first = await self._outbox.get()
                batch = [first]
                while not self._outbox.empty() and len(batch) < 500:
                    batch.append(self._outbox.get_nowait())
                # Hints carry no data: one message per channel wakes its listeners.
                commands = [
                    ("PUBLISH", self._prefix + channel, self._src)
                    for channel in dict.fromkeys(hint.channel for hint in batch)
                ]
                try:
                    if await self._connector.stale(conn):
                        assert conn is not None
                        await _drop(pool, conn)
                        conn = None
                    conn = await self._send_hints(pool, conn, commands)
                    self._publish_outage.recovered()
                except self._failures as exc:
                    conn = None
                    # Dropped on purpose: other processes fall back to their poll interval.
                    self._publish_outage.failed(exc, dropped=len(batch))
                    await asyncio.sleep(0.2)
                finally:
                    self._unsent -= len(batch)
        finally:
            with contextlib.suppress(Exception):
                await pool.disconnect()

    async def _send_hints(
        self,
        pool: aioredis.ConnectionPool,
        conn: AbstractConnection | None,
        commands: list[tuple[str, str, bytes]],
    ) -> AbstractConnection:
        """Send `commands` and read their replies; the connection to use next time.

        A connection that fails is dropped and the batch is sent once more on a new one (an
        idle connection may have been closed by a Redis restart); a second failure raises.
        """
        if conn is not None:
            try:
                await _exchange(conn, commands)
                return conn
            except self._failures:
                await _drop(pool, conn)
        conn = await pool.get_connection()  # type: ignore[no-untyped-call]
        try:
            await _exchange(conn, commands)
        except BaseException:
            await _drop(pool, conn)
            raise
        return conn


async def _exchange(conn: AbstractConnection, commands: list[tuple[str, str, bytes]]) -> None:
    """Send `commands` in one write and read one reply each."""
    await conn.send_packed_command(conn.pack_commands(commands), check_health=False)
    for _ in commands:
        await conn.read_response()


async def _drop(pool: aioredis.ConnectionPool, conn: AbstractConnection) -> None:
    """Close a failed connection for good: replies may be left unread on it."""
    with contextlib.suppress(Exception):
        await conn.disconnect()
    with contextlib.suppress(Exception):
        await pool.release(conn)


#: Delays after which hints for work written in a caller's open transaction are sent again.
UNCOMMITTED_HINT_DELAYS = (0.05, 0.5)


def hint_around_caller_commit(send: Callable[[], None]) -> None:
    """Run `send` (which sends hints) now and again after `UNCOMMITTED_HINT_DELAYS`.

    For work written inside a caller's transaction: its commit is not visible here, so a hint
    sent at once may reach a receiver that still sees nothing. Receivers re-check Postgres on
    every hint and poll anyway, so early or repeated hints only cost a query.
    """
    send()
    loop = asyncio.get_running_loop()
    for delay in UNCOMMITTED_HINT_DELAYS:
        loop.call_later(delay, send)


def create_waker(
    endpoint: RedisEndpoint, *, prefix: str = "ripple:", poll_interval: float = 1.0
) -> NullWaker:
    """A `RedisWaker` when a Redis is configured, else a process-local `NullWaker`."""
    if endpoint.configured:
        return RedisWaker(endpoint, prefix=prefix, poll_interval=poll_interval)
    return NullWaker(poll_interval)
