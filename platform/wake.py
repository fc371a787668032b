"""The wake layer: small typed hints after a commit, so waiters react in milliseconds.

Redis pub/sub carries hints between processes; hints are also delivered to waiters in this
process directly. Redis holds no state and is optional at every moment: a waiter never waits
longer than the poll interval before its caller re-checks Postgres, so a lost hint (Redis down,
restarted, or dropping messages) only delays work. The Redis side reconnects and resubscribes
by itself. This module owns channel names; it must not know any table.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Literal, Protocol

import redis.asyncio as aioredis
import structlog
from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from redis.exceptions import RedisError

__all__ = [
    "CH_CANCELS",
    "CH_RUNS",
    "AnyHint",
    "DeliveriesReady",
    "Listener",
    "NullWaker",
    "QueueReady",
    "RedisWaker",
    "RunCanceled",
    "RunFinished",
    "RunReady",
    "SubscriptionsChanged",
    "WakeHint",
    "Waker",
    "create_waker",
    "hint_around_caller_commit",
]

log = structlog.get_logger("ripple.wake")

#: Longest `RedisWaker.close()` waits for unsent hints to reach Redis.
_CLOSE_FLUSH_SECONDS = 1.0

#: Channel names, relative to the deployment's prefix.
CH_RUNS = "runs"  # some workflow run became available
CH_DELIVERIES = "deliveries"  # some webhook delivery became due
CH_SUBSCRIPTIONS = "subscriptions"  # the subscription set changed
CH_CANCELS = "cancels"  # runs were canceled (workers stop executing them)


def run_channel(run_id: str) -> str:
    """Channel of one run's terminal hint (what `result()` waits on)."""
    return f"run:{run_id}"


def queue_channel(queue: str) -> str:
    """Channel of one queue's new-message hint (what long-polling receivers wait on)."""
    return f"queue:{queue}"


class _Hint(BaseModel):
    model_config = {"frozen": True}


class RunReady(_Hint):
    """A run is available to claim now."""

    type: Literal["run_ready"] = "run_ready"
    workflow: str = ""

    @property
    def channel(self) -> str:
        return CH_RUNS


class RunFinished(_Hint):
    """A run reached a terminal state (or changed state a result() caller cares about)."""

    type: Literal["run_finished"] = "run_finished"
    run_id: str

    @property
    def channel(self) -> str:
        return run_channel(self.run_id)


class RunCanceled(_Hint):
    """Runs were canceled; a worker executing one cancels its task."""

    type: Literal["run_canceled"] = "run_canceled"
    run_ids: list[str]

    @property
    def channel(self) -> str:
        return CH_CANCELS


class QueueReady(_Hint):
    """A queue has messages to receive."""

    type: Literal["queue_ready"] = "queue_ready"
    queue: str

    @property
    def channel(self) -> str:
        return queue_channel(self.queue)


class DeliveriesReady(_Hint):
    """Webhook deliveries are due."""

    type: Literal["deliveries_ready"] = "deliveries_ready"

    @property
    def channel(self) -> str:
        return CH_DELIVERIES


class SubscriptionsChanged(_Hint):
    """The subscription set changed; cached copies must reload."""

    type: Literal["subscriptions_changed"] = "subscriptions_changed"

    @property
    def channel(self) -> str:
        return CH_SUBSCRIPTIONS


AnyHint = RunReady | RunFinished | RunCanceled | QueueReady | DeliveriesReady | SubscriptionsChanged
WakeHint = Annotated[AnyHint, Field(discriminator="type")]


class _Envelope(BaseModel):
    src: str
    hint: WakeHint


_ENVELOPE = TypeAdapter(_Envelope)


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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), limit)
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

    @contextlib.asynccontextmanager
    async def listen(self, channel: str) -> AsyncIterator[Listener]:
        listener = Listener(channel, self.poll_interval)
        self._listeners.setdefault(channel, set()).add(listener)
        try:
            yield listener
        finally:
            group = self._listeners.get(channel)
            if group is not None:
                group.discard(listener)
                if not group:
                    del self._listeners[channel]

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        self._dispatch_all()


class RedisWaker(NullWaker):
    """Hints go to waiters in this process at once and to other processes via Redis pub/sub.

    One subscriber connection per process pattern-subscribes to the deployment prefix and
    reconnects with backoff after any failure; on every (re)connect all local listeners are
    woken, since hints may have been missed while disconnected. Publishing is done by a
    background task from a bounded buffer: `notify()` never waits on Redis.
    """

    def __init__(self, url: str, *, prefix: str = "ripple:", poll_interval: float = 1.0) -> None:
        super().__init__(poll_interval)
        self._url = url
        self._prefix = prefix
        self._src = f"{os.getpid()}-{id(self):x}"
        self._outbox: asyncio.Queue[AnyHint] = asyncio.Queue(maxsize=10_000)
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        #: Hints accepted by notify() and not yet sent or dropped (close() flushes them).
        self._unsent = 0
        #: True while the subscriber connection is up (for health reporting and tests).
        self.connected = asyncio.Event()

    def _client(self) -> aioredis.Redis:
        return aioredis.Redis.from_url(
            self._url,
            socket_connect_timeout=1.0,
            socket_timeout=None,
            socket_keepalive=True,
            health_check_interval=5,
        )

    def notify(self, *hints: AnyHint) -> None:
        super().notify(*hints)
        for hint in hints:
            with contextlib.suppress(asyncio.QueueFull):
                self._outbox.put_nowait(hint)
                self._unsent += 1

    async def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._subscribe_loop(), name="ripple-wake-subscriber"),
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
        await super().close()

    async def _subscribe_loop(self) -> None:
        backoff = 0.05
        while not self._closing:
            client = self._client()
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.psubscribe(self._prefix + "*")
                self.connected.set()
                backoff = 0.05
                log.debug("wake_subscribed", prefix=self._prefix)
                self._dispatch_all()
                while True:
                    message = await pubsub.get_message(timeout=5.0)
                    if message is not None:
                        self._receive(message.get("data"))
            except (RedisError, OSError) as exc:
                if self.connected.is_set():
                    log.warning("wake_redis_lost", error=str(exc))
                self.connected.clear()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            finally:
                self.connected.clear()
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]
                with contextlib.suppress(Exception):
                    await client.aclose()

    def _receive(self, data: object) -> None:
        if not isinstance(data, bytes | str):
            return
        try:
            envelope = _ENVELOPE.validate_json(data)
        except ValidationError:
            log.debug("wake_bad_message")
            return
        if envelope.src != self._src:
            self._dispatch(envelope.hint.channel)

    async def _publish_loop(self) -> None:
        client = self._client()
        try:
            while True:
                first = await self._outbox.get()
                batch = [first]
                while not self._outbox.empty() and len(batch) < 500:
                    batch.append(self._outbox.get_nowait())
                try:
                    async with client.pipeline(transaction=False) as pipe:
                        for hint in batch:
                            body = _Envelope(src=self._src, hint=hint).model_dump_json()
                            pipe.publish(self._prefix + hint.channel, body)
                        await pipe.execute()
                except (RedisError, OSError) as exc:
                    # Dropped on purpose: other processes fall back to their poll interval.
                    log.debug("wake_publish_failed", error=str(exc), dropped=len(batch))
                    await asyncio.sleep(0.2)
                finally:
                    self._unsent -= len(batch)
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()


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
    redis_url: str | None, *, prefix: str = "ripple:", poll_interval: float = 1.0
) -> NullWaker:
    """A `RedisWaker` when a URL is configured, else a process-local `NullWaker`."""
    if redis_url:
        return RedisWaker(redis_url, prefix=prefix, poll_interval=poll_interval)
    return NullWaker(poll_interval)
