"""`WebhookDispatcher`: claims due webhook deliveries and POSTs them, one attempt each.

Owns the delivery loop: claim with `FOR UPDATE SKIP LOCKED` under a lease (the claim pushes
`next_attempt_at` to the lease expiry, so a dispatcher that dies mid-attempt loses the delivery
to the next claimer: at-least-once), send with Standard Webhooks headers through the
SSRF-guarded aiohttp session (`transport.py`), and record the attempt and its outcome in one
transaction. Concurrency is bounded overall (`webhook_concurrency`) and per subscription
endpoint (`webhook_endpoint_concurrency`): a saturated endpoint's deliveries are not even
claimed, so a slow endpoint never takes the slots of others; connections are also capped per
origin (`webhook_origin_concurrency`), so many subscriptions of one slow host cannot hold every
connection either. Claims run ahead of the free slots into a small buffer (BUFFER_SHARE), so a
freed slot starts its next delivery at once; buffered deliveries hold their claim but no slot.
The outcome rules live in `outcomes.py`, signing in `signing.py`, SSRF in `ssrf.py`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import aiohttp
import structlog
from prometheus_client import Counter

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool, map_errors, transaction
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import CH_DELIVERIES, SubscriptionsChanged, Waker
from ripple.platform.errors import RippleError
from ripple.platform.events import subscription_store
from ripple.platform.ops.metrics import DELIVERIES
from ripple.platform.ops.tracing import recording, span
from ripple.subscribers.webhooks import delivery_store as store
from ripple.subscribers.webhooks.outcomes import Decision, decide, schedule_for
from ripple.subscribers.webhooks.signing import signature_header
from ripple.subscribers.webhooks.ssrf import (
    AddressPolicy,
    Resolver,
    SystemResolver,
    check_literal_url,
)
from ripple.subscribers.webhooks.transport import open_session

__all__ = ["WebhookDispatcher", "message_body", "signing_secrets"]

log = get_logger("ripple.webhooks")

#: Bytes of a response body kept with the attempt.
RESPONSE_HEAD: Final = 2048
#: Most bytes of a response body ever read (the rest is not downloaded).
RESPONSE_READ_CAP: Final = 64 * 1024
#: Seconds a claim outlives the attempt's timeout before another dispatcher may take over.
LEASE_MARGIN: Final = 10.0
#: Seconds between sweeps of deliveries whose subscription was deleted.
ORPHAN_SWEEP_EVERY: Final = 60.0
USER_AGENT: Final = "Ripple-Webhooks/0.1"
#: Batched writes of finished attempts in flight at once (each holds one pooled connection).
#: One: attempts that finish during a write go into the next, bigger batch. A delivered
#: attempt's slot is free before its write, so the wait holds no delivery back; more writers
#: only made more, smaller batches.
MAX_RECORDERS: Final = 1
#: While attempts are in flight, claim once this share of `webhook_concurrency` is free or
#: REFILL_WAIT seconds passed since the last claim, whichever comes first: refilling every
#: freed slot at once cost one claim statement per delivery under load, and the wait bounds
#: the delay when slow endpoints hold most slots (so they never starve the others).
REFILL_SHARE: Final = 0.25
REFILL_WAIT: Final = 0.01
#: Claimed deliveries kept ready beyond the free slots, as a share of `webhook_concurrency`: a
#: freed slot starts the next one at once instead of waiting for a claim, which on a loop busy
#: with many exchanges takes far longer than Postgres does and left most slots idle. One
#: endpoint's share of it is ENDPOINT_BUFFER_SHARE.
BUFFER_SHARE: Final = 2.0
#: Deliveries one endpoint may have buffered, as a multiple of its slot cap
#: (`webhook_endpoint_concurrency`; at most the whole buffer): enough to keep its slots busy
#: while the next claim is under way (at 1x, each claim emptied the buffer of an endpoint that
#: had every slot of a worker, and some of its slots sat idle).
ENDPOINT_BUFFER_SHARE: Final = 2.0
#: Seconds a delivery may wait in the buffer; older ones are released (due again, the claim's
#: attempt count given back) rather than sent late: the claim's lease (the attempt's timeout
#: plus LEASE_MARGIN, from the claim) must still cover the whole attempt once it starts.
BUFFER_MAX_AGE: Final = LEASE_MARGIN / 4
#: Seconds between checks for attempts past their timeout: one sweep cancels every overdue
#: attempt, instead of a loop timer armed and cancelled per attempt (`asyncio.timeout`). An
#: attempt's timeout fires up to this much late.
DEADLINE_SWEEP: Final = 0.05
#: Most URLs whose literal-address check passed are remembered (the policy never changes).
CHECKED_URLS: Final = 4096
#: The decision for a 2xx answer (`decide` returns the same).
DELIVERED: Final = Decision("delivered")


def message_body(topic: str, event_time: datetime, payload_json: str) -> bytes:
    """The POSTed JSON: `{"type": topic, "timestamp": ISO-8601, "data": payload}`.

    `payload_json` is the payload's JSON text as stored, spliced in without decoding it.
    """
    head = json.dumps(topic, ensure_ascii=False)
    stamp = event_time.astimezone(UTC).isoformat()
    return f'{{"type":{head},"timestamp":"{stamp}","data":{payload_json}}}'.encode()


def signing_secrets(target: Mapping[str, Any], now: datetime) -> list[str]:
    """The secrets to sign with: the current one, plus the previous one during its overlap."""
    secrets = [str(target["secret"])]
    previous, until = target.get("previousSecret"), target.get("previousSecretExpiresAt")
    if previous and until:
        with contextlib.suppress(ValueError, TypeError):
            if datetime.fromisoformat(str(until)) > now:
                secrets.append(str(previous))
    return secrets


def _error_text(exc: BaseException) -> str:
    detail = str(exc) or type(exc).__doc__ or ""
    return f"{type(exc).__name__}: {detail.strip().splitlines()[0] if detail.strip() else ''}"[:500]


async def _read_head(response: aiohttp.ClientResponse) -> str:
    """The start of the body; at most RESPONSE_READ_CAP bytes are read, the rest never is."""
    if response.content.at_eof():  # no body (204, Content-Length: 0) or already read
        return ""
    chunks: list[bytes] = []
    size = 0
    while size < RESPONSE_READ_CAP:
        chunk = await response.content.read(RESPONSE_READ_CAP - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    head = b"".join(chunks)[:RESPONSE_HEAD]
    return head.decode("utf-8", errors="replace").replace("\x00", "")


class WebhookDispatcher:
    """Delivers due webhook deliveries; a `BackgroundService` (run by workers).

    Args:
        pool: the Postgres pool.
        waker: wakes the loop on `DeliveriesReady`; without hints it polls.
        settings: timeouts, concurrency limits, allowed networks, poll interval.
        resolver: DNS seam for the SSRF check (default: the system resolver).
        rng: randomness for retry jitter (tests pass a seeded one).
    """

    name = "webhook-dispatcher"

    def __init__(
        self,
        pool: Pool,
        waker: Waker,
        settings: Settings,
        *,
        resolver: Resolver | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._pool = pool
        self._waker = waker
        self._settings = settings
        self._policy = AddressPolicy.from_cidrs(settings.webhook_allowed_networks)
        self._resolver: Resolver = resolver or SystemResolver()
        self._http: aiohttp.ClientSession | None = None
        self._rng = rng or random.Random()
        self._tasks: set[asyncio.Task[None]] = set()
        #: attempts holding a concurrency slot; a delivered attempt gives its slot back when
        #: its HTTP exchange ends, before its outcome is written
        self._sending: dict[asyncio.Task[None], str] = {}
        #: the claim each in-flight task holds, to release it if shutdown cancels the task
        self._claims: dict[asyncio.Task[None], store.ClaimedDelivery] = {}
        self._in_flight: dict[str, int] = {}
        self._stopping = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._last_orphan_sweep = 0.0
        #: failed attempts whose slot stays taken until their outcome is written
        self._held = 0
        #: finished attempts waiting for the next batched write, and the tasks writing them
        self._unrecorded: list[_Outcome] = []
        self._recorders: set[asyncio.Task[None]] = set()
        self._refill_at = max(1, int(settings.webhook_concurrency * REFILL_SHARE))
        #: claimed, not yet started deliveries with the monotonic time their claim was sent,
        #: oldest first (a claim appends; starts and purges keep the order)
        self._buffer: collections.deque[tuple[float, store.ClaimedDelivery]] = collections.deque()
        #: buffered deliveries per endpoint (they count toward the endpoint's claim limit)
        self._buffered: dict[str, int] = {}
        self._buffer_size = max(1, int(settings.webhook_concurrency * BUFFER_SHARE))
        self._endpoint_buffer = max(
            1,
            min(
                int(settings.webhook_endpoint_concurrency * ENDPOINT_BUFFER_SHARE),
                self._buffer_size,
            ),
        )
        #: tasks giving unsent claims back (stale, purged or shut down)
        self._releasers: set[asyncio.Task[None]] = set()
        #: attempts started so far (what `run_until_idle` reports)
        self._started = 0
        self._claimed_at = float("-inf")
        self._checked_urls: set[str] = set()
        #: the DELIVERIES counter of each outcome (labelled once)
        self._counted: dict[str, Counter] = {}
        #: when each attempt in its exchange times out (monotonic), and those the deadline
        #: sweeper cancelled for it (`_sweep_deadlines`)
        self._deadlines: dict[asyncio.Task[None], float] = {}
        self._expired: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; `run()` lets in-flight attempts finish (up to shutdown_grace)."""
        self._stopping.set()

    async def run(self) -> None:
        """Claim and deliver until `stop()`; then drain in-flight attempts and return."""
        log.info("webhook_dispatcher_started")
        try:
            async with self._waker.listen(CH_DELIVERIES) as listener:
                while not self._stopping.is_set():
                    # Cleared before claiming: a slot freed while the claim runs must wake us.
                    self._slot_freed.clear()
                    self._expire_buffer()
                    claimed = await self._claim_round()
                    await self._maybe_sweep_orphans()
                    if claimed:
                        continue
                    await self._idle(
                        listener.wait(), self._wait_timeout(self._settings.poll_interval)
                    )
        finally:
            await self._drain()
            log.info("webhook_dispatcher_stopped")

    async def run_until_idle(self) -> int:
        """Deliver until nothing is due, buffered or in flight; return the attempts started.

        A database error while claiming is raised (it must not look like "idle").
        """
        started = self._started
        try:
            while True:
                # Attempts that end while the claim runs free slots the claim did not see,
                # so "idle" needs an empty claim that started with nothing in flight.
                # Outcomes being written count too: a retry may be due as soon as it is; and
                # so do buffered deliveries and released ones (due again once released).
                busy = self._busy()
                self._slot_freed.clear()
                self._expire_buffer()
                claimed = await self._claim_round(raise_errors=True)
                if claimed:
                    continue
                if self._busy():
                    freed = asyncio.ensure_future(self._slot_freed.wait())
                    try:
                        await asyncio.wait(
                            {*self._tasks, *self._recorders, *self._releasers, freed},
                            timeout=self._wait_timeout(None),
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                    finally:
                        freed.cancel()
                elif not busy:
                    return self._started - started
        finally:
            self._release_buffer()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._released()
            await self._recorded()
            await self.aclose()

    def _busy(self) -> bool:
        return bool(self._tasks or self._recorders or self._buffer or self._releasers)

    def _wait_timeout(self, default: float | None) -> float | None:
        """How long the loop may wait: a deferred refill's wait, at most until the oldest
        buffered delivery goes stale (it is released then)."""
        timeout = REFILL_WAIT if self._deferring() else default
        if self._buffer:
            expiry = max(0.0, self._buffer[0][0] + BUFFER_MAX_AGE - time.monotonic())
            timeout = expiry if timeout is None else min(timeout, expiry)
        return timeout

    async def aclose(self) -> None:
        """Close the HTTP session (its keep-alive connections)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def _released(self) -> None:
        """Wait until every unsent claim handed back is released."""
        while self._releasers:
            await asyncio.gather(*self._releasers, return_exceptions=True)

    async def _recorded(self) -> None:
        """Wait until every finished attempt handed to the writer is written."""
        self._ensure_writer()
        while self._recorders:
            await asyncio.gather(*self._recorders, return_exceptions=True)
            self._ensure_writer()

    async def _idle(self, hint: Any, timeout: float | None = None) -> None:
        """Wait for a hint, a freed slot, stop, or the poll interval, whichever comes first."""
        waiters = {
            asyncio.ensure_future(hint),
            asyncio.ensure_future(self._slot_freed.wait()),
            asyncio.ensure_future(self._stopping.wait()),
        }
        try:
            await asyncio.wait(
                waiters,
                timeout=self._settings.poll_interval if timeout is None else timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    async def _drain(self) -> None:
        # Buffered deliveries are given back at once (none starts once stopping).
        self._release_buffer()
        if self._tasks:
            _done, pending = await asyncio.wait(
                set(self._tasks), timeout=self._settings.shutdown_grace
            )
            claims = [self._claims[t] for t in pending if t in self._claims]
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            # Outcomes already handed to the recorder are written before the rest is released.
            await self._recorded()
            await self._release(claims)
        await self._released()
        await self._recorded()
        await self.aclose()

    async def _release(
        self, claims: list[store.ClaimedDelivery], *, attempted: bool = True
    ) -> None:
        """Make cancelled attempts (or, `attempted` False, never-sent claims) due again now,
        else they wait for their lease to expire."""
        if not claims:
            return
        try:
            with map_errors():
                async with self._pool.acquire() as conn:
                    count = await store.release_claims(conn, claims, attempted=attempted)
        except RippleError as exc:
            log.warning("webhook_release_failed", error=str(exc), count=len(claims))
            return
        log.info("webhook_claims_released", count=count, attempted=attempted)

    # -- claiming ----------------------------------------------------------------------------

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = open_session(
                self._policy,
                self._resolver,
                limit=self._settings.webhook_concurrency,
                limit_per_host=self._settings.webhook_origin_concurrency,
                user_agent=USER_AGENT,
            )
        return self._http

    def _free_slots(self) -> int:
        return self._settings.webhook_concurrency - len(self._sending) - self._held

    def _wanted(self) -> int:
        """Deliveries a claim may take now: the free slots and the buffer's free room."""
        return self._free_slots() + self._buffer_size - len(self._buffer)

    def _deferring(self) -> bool:
        """What a claim may take waits for a batch (see REFILL_SHARE) and the wait has not
        run out."""
        wanted = self._wanted()
        return (
            bool(self._sending or self._held or self._buffer)
            and 0 < wanted < self._refill_at
            and time.monotonic() - self._claimed_at < REFILL_WAIT
        )

    async def _claim_round(self, *, raise_errors: bool = False) -> int:
        wanted = self._wanted()
        if wanted <= 0 or self._deferring():
            return 0
        claimed_at = self._claimed_at = time.monotonic()
        # An endpoint's buffered deliveries count toward its claim limit (so one endpoint
        # buffers at most `_endpoint_buffer` beyond its own slots); only the started ones
        # count toward its HTTP cap (`_start_buffered`).
        counts = dict(self._in_flight)
        for sub, n in self._buffered.items():
            counts[sub] = counts.get(sub, 0) + n
        try:
            with map_errors():
                async with self._pool.acquire() as conn:
                    claimed = await store.claim_due(
                        conn,
                        limit=wanted,
                        endpoint_limit=self._settings.webhook_endpoint_concurrency
                        + self._endpoint_buffer,
                        in_flight=counts,
                        default_timeout=self._settings.webhook_timeout,
                        lease_margin=LEASE_MARGIN,
                    )
        except RippleError as exc:
            if raise_errors:
                raise
            log.warning("webhook_claim_failed", error=str(exc))
            await asyncio.sleep(self._settings.poll_interval)
            return 0
        buffered = self._buffered
        for delivery in claimed:
            sub = delivery.subscription_id
            buffered[sub] = buffered.get(sub, 0) + 1
            self._buffer.append((claimed_at, delivery))
        self._start_buffered()
        return len(claimed)

    def _start_buffered(self) -> None:
        """Start buffered deliveries, oldest first, while slots are free; skip those whose
        endpoint is at its cap (started and held attempts), release stale ones."""
        self._expire_buffer()
        free = self._free_slots()
        if free <= 0 or not self._buffer or self._stopping.is_set():
            return
        cap = self._settings.webhook_endpoint_concurrency
        buffer, in_flight = self._buffer, self._in_flight
        i = 0
        while free > 0 and i < len(buffer):
            delivery = buffer[i][1]
            sub = delivery.subscription_id
            if in_flight.get(sub, 0) >= cap:
                i += 1
                continue
            del buffer[i]
            self._unbuffer(sub)
            in_flight[sub] = in_flight.get(sub, 0) + 1
            task = asyncio.create_task(self._attempt(delivery), name=f"webhook-{delivery.id}")
            self._tasks.add(task)
            self._sending[task] = sub
            self._claims[task] = delivery
            task.add_done_callback(self._finished)
            self._started += 1
            free -= 1

    def _unbuffer(self, sub: str) -> None:
        left = self._buffered[sub] - 1
        if left:
            self._buffered[sub] = left
        else:
            del self._buffered[sub]

    def _expire_buffer(self) -> None:
        """Release buffered deliveries claimed more than BUFFER_MAX_AGE ago (the oldest are
        first); they are due again for whichever dispatcher has a slot."""
        buffer = self._buffer
        stale_before = time.monotonic() - BUFFER_MAX_AGE
        if not buffer or buffer[0][0] > stale_before:
            return
        stale: list[store.ClaimedDelivery] = []
        while buffer and buffer[0][0] <= stale_before:
            delivery = buffer.popleft()[1]
            self._unbuffer(delivery.subscription_id)
            stale.append(delivery)
        self._give_back(stale)

    def _purge_endpoint(self, sub: str) -> None:
        """Release the endpoint's buffered deliveries (it is being disabled: none is sent)."""
        if sub not in self._buffered:
            return
        dropped = [d for _, d in self._buffer if d.subscription_id == sub]
        self._buffer = collections.deque(i for i in self._buffer if i[1].subscription_id != sub)
        del self._buffered[sub]
        self._give_back(dropped)

    def _release_buffer(self) -> None:
        """Release every buffered delivery (shutdown)."""
        dropped = [d for _, d in self._buffer]
        self._buffer.clear()
        self._buffered.clear()
        self._give_back(dropped)

    def _give_back(self, claims: list[store.ClaimedDelivery]) -> None:
        """Release never-sent claims in the background (`_released` waits for it)."""
        if not claims:
            return
        task = asyncio.create_task(self._release(claims, attempted=False), name="webhook-release")
        self._releasers.add(task)
        task.add_done_callback(self._releasers.discard)

    def _free_slot(self, task: asyncio.Task[None] | None) -> None:
        """Give back the slot (overall and per endpoint) `task` holds, if it still does."""
        sub = self._sending.pop(task, None) if task is not None else None
        if sub is not None:
            self._release_endpoint(sub)

    def _hold_slot(self, task: asyncio.Task[None] | None) -> str | None:
        """Move `task`'s slot to the outcome it hands over; the endpoint, or None if it had
        none. The recorder gives it back (`_release_held`) once the outcome is written."""
        sub = self._sending.pop(task, None) if task is not None else None
        if sub is not None:
            self._held += 1
        return sub

    def _release_held(self, sub: str) -> None:
        self._held -= 1
        self._release_endpoint(sub)

    def _release_endpoint(self, sub: str) -> None:
        left = self._in_flight.get(sub, 1) - 1
        if left <= 0:
            self._in_flight.pop(sub, None)
        else:
            self._in_flight[sub] = left
        self._start_buffered()
        self._slot_freed.set()

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._claims.pop(task, None)
        self._free_slot(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("webhook_attempt_crashed", error=repr(task.exception()))

    async def _maybe_sweep_orphans(self) -> None:
        now = time.monotonic()
        if now - self._last_orphan_sweep < ORPHAN_SWEEP_EVERY:
            return
        self._last_orphan_sweep = now
        try:
            async with transaction(self._pool) as conn:
                count = await store.fail_orphans(conn)
        except RippleError as exc:
            log.warning("webhook_orphan_sweep_failed", error=str(exc))
            return
        if count:
            log.info("webhook_orphans_failed", count=count)

    # -- one attempt -------------------------------------------------------------------------

    async def _attempt(self, delivery: store.ClaimedDelivery) -> None:
        # Every log line of the attempt carries its ids. The task runs in its own copy of the
        # context, so they vanish with it: no unbinding (bound_contextvars would also read
        # the whole context first, a cost per attempt).
        structlog.contextvars.bind_contextvars(
            event_id=delivery.event_id,
            subscription_id=delivery.subscription_id,
            delivery_id=delivery.id,
            attempt=delivery.attempt,
        )
        if not recording():  # no tracer provider: skip building a no-op span per attempt
            await self._attempt_inner(delivery)
            return
        with span(
            "webhook.deliver",
            parent=delivery.trace,
            event_id=delivery.event_id,
            subscription_id=delivery.subscription_id,
            delivery_id=delivery.id,
            attempt=delivery.attempt,
        ):
            await self._attempt_inner(delivery)

    async def _attempt_inner(self, delivery: store.ClaimedDelivery) -> None:
        target = delivery.target
        started_at = datetime.now(UTC)
        t0 = time.perf_counter()
        status_code: int | None = None
        error: str | None = None
        retry_after: str | None = None
        head: str | None = None
        timeout = float(target.get("timeout") or self._settings.webhook_timeout)
        task = asyncio.current_task()
        assert task is not None
        # The whole exchange, from waiting for a connection to the end of the response head,
        # runs within the timeout: past it, the deadline sweeper cancels this task. Only
        # awaits inside this `try` can see that cancellation (registered just before, removed
        # in its `finally`), so it always lands in the handler below.
        self._deadlines[task] = t0 + timeout
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_deadlines(), name="webhook-deadlines")
        try:
            url = str(target["url"])
            # Host names are resolved and checked once, when a connection is opened.
            self._check_literal(url)
            body = message_body(delivery.topic, delivery.event_time, delivery.payload_json)
            stamp = int(time.time())
            msg_id = "msg_" + delivery.id.replace("-", "")
            headers = {
                "content-type": "application/json",
                "webhook-id": msg_id,
                "webhook-timestamp": str(stamp),
                "webhook-signature": signature_header(
                    msg_id, stamp, body, signing_secrets(target, started_at)
                ),
            }
            async with self._client().post(
                url, data=body, headers=headers, allow_redirects=False
            ) as response:
                status_code = response.status
                retry_after = response.headers.get("retry-after")
                head = await _read_head(response)
        except asyncio.CancelledError:
            # Cancelled for its timeout (and nothing else, e.g. shutdown): a timed-out attempt.
            if task not in self._expired or task.uncancel() > 0:
                raise
            error = None if status_code is not None else _error_text(TimeoutError())
        except Exception as exc:  # any failure of this attempt is recorded and retried
            error = _error_text(exc)
            if status_code is not None:
                error = None  # the response head timed out; the status still counts
        finally:
            del self._deadlines[task]
            self._expired.discard(task)
        latency_ms = (time.perf_counter() - t0) * 1000.0
        if status_code is not None and 200 <= status_code < 300:
            decision = DELIVERED  # what decide() answers, without its schedule and clock
        else:
            decision = decide(
                attempt=delivery.attempt,
                status_code=status_code,
                error=error,
                retry_after=retry_after,
                schedule=schedule_for(target),
                now=datetime.now(UTC),
                rng=self._rng,
            )
        await self._record(delivery, decision, started_at, latency_ms, status_code, error, head)

    async def _sweep_deadlines(self) -> None:
        """Cancel attempts past their timeout, every DEADLINE_SWEEP seconds while any is in
        its exchange (`_attempt_inner` turns that cancellation into a timeout)."""
        try:
            while self._deadlines:
                await asyncio.sleep(DEADLINE_SWEEP)
                now = time.perf_counter()  # the clock of the deadlines (`t0`)
                for task, deadline in self._deadlines.items():
                    if deadline <= now and task not in self._expired:
                        self._expired.add(task)
                        task.cancel()
        finally:
            self._sweeper = None

    def _check_literal(self, url: str) -> None:
        """`check_literal_url`, remembered for URLs that passed (same URL, same verdict)."""
        if url in self._checked_urls:
            return
        check_literal_url(url, self._policy)
        if len(self._checked_urls) >= CHECKED_URLS:
            self._checked_urls.clear()
        self._checked_urls.add(url)

    async def _record(
        self,
        delivery: store.ClaimedDelivery,
        decision: Decision,
        started_at: datetime,
        latency_ms: float,
        status_code: int | None,
        error: str | None,
        head: str | None,
    ) -> None:
        """Hand the outcome to the batched writer, or (disabling) write it here and now."""
        action = decision.action
        status = {"delivered": "delivered", "retry": "pending"}.get(action, "failed")
        # A successful exchange's slot goes to the next delivery at once (the claim's lease
        # keeps this one from being claimed again); a failure's slot stays taken until its
        # outcome is written, because the write may disable the endpoint and nothing more may
        # be sent to it before then (a disabling attempt keeps its slot as it writes here).
        held = None
        if action not in ("delivered", "disable"):
            held = self._hold_slot(asyncio.current_task())
        outcome = _Outcome(
            finished=store.FinishedAttempt(
                delivery=delivery,
                status=status,
                delay=decision.delay,
                status_code=status_code,
                last_error=decision.reason,
                started_at=started_at,
                latency_ms=latency_ms,
                outcome=action,
                error=error,
                response_body=head,
                healthy=action == "delivered",
            ),
            decision=decision,
            held=held,
        )
        if action != "disable":
            # Common case: the attempt ends here and its outcome is written with the others
            # that finish meanwhile (one statement).
            self._unrecorded.append(outcome)
            self._ensure_writer()
            return
        # Disabling (rare) is one transaction with the attempt's record.
        try:
            async with transaction(self._pool) as conn:
                ((owned, _exhausted),) = await store.finish_attempts(
                    conn, [outcome.finished], self._settings.webhook_disable_after
                )
                if not owned:
                    raise _ClaimLost
                reason = decision.reason or "endpoint refused the delivery for good"
                disabled = await self._disable(conn, delivery.subscription_id, reason)
        except _ClaimLost:
            log.warning("webhook_claim_lost", outcome=action, **_ids(delivery))
            return
        except RippleError as exc:
            _record_failed(exc, action, delivery)
            return
        self._observe(outcome, disabled)

    def _ensure_writer(self) -> None:
        """Start a writer for the handed-over outcomes unless enough are running.

        Counted by done(), not by membership: a writer that just found nothing left and
        returned stays in the set until its done-callback runs, and an outcome handed over in
        between must still get a writer (else it waits for the next attempt's).
        """
        if self._unrecorded and sum(not t.done() for t in self._recorders) < MAX_RECORDERS:
            task = asyncio.create_task(self._record_batches(), name="webhook-recorder")
            self._recorders.add(task)
            task.add_done_callback(self._recorders.discard)

    async def _record_batches(self) -> None:
        """Write finished attempts, all that have gathered, one statement per batch.

        Attempts finishing during a write are written together by the next batch.
        """
        while self._unrecorded:
            batch, self._unrecorded = self._unrecorded, []
            try:
                try:
                    with map_errors():
                        async with self._pool.acquire() as conn:
                            results = await store.finish_attempts(
                                conn,
                                [o.finished for o in batch],
                                self._settings.webhook_disable_after,
                            )
                except Exception as exc:
                    for o in batch:
                        _record_failed(exc, o.decision.action, o.finished.delivery)
                    continue
                for o, (owned, exhausted) in zip(batch, results, strict=True):
                    await self._settle(o, owned=owned, exhausted=exhausted)
            finally:
                for o in batch:
                    if o.held is not None:
                        self._release_held(o.held)

    async def _settle(self, outcome: _Outcome, *, owned: bool, exhausted: bool) -> None:
        """After the write: log a lost claim, disable an exhausted endpoint, observe."""
        delivery = outcome.finished.delivery
        if not owned:
            log.warning("webhook_claim_lost", outcome=outcome.decision.action, **_ids(delivery))
            return
        disabled = None
        if exhausted:
            disable_after = self._settings.webhook_disable_after
            reason = f"endpoint failed continuously for {disable_after:.0f}s: subscription disabled"
            try:
                # Own transaction: if it is lost, the next failure finds the endpoint still
                # exhausted and disables it then.
                async with transaction(self._pool) as conn:
                    disabled = await self._disable(conn, delivery.subscription_id, reason)
            except RippleError as exc:
                _record_failed(exc, outcome.decision.action, delivery)
                return
        self._observe(outcome, disabled)

    async def _disable(self, conn: Connection, sub: str, reason: str) -> str | None:
        """Disable the subscription in `conn`'s transaction; the reason, or None if it was."""
        # Its buffered deliveries are not sent: nothing more may reach a disabled endpoint.
        self._purge_endpoint(sub)
        if not await store.disable_subscription(conn, sub, reason):
            return None
        await subscription_store.bump_version(conn)
        return reason

    def _observe(self, outcome: _Outcome, disabled_reason: str | None) -> None:
        decision = outcome.decision
        counter = self._counted.get(decision.action)
        if counter is None:  # labels() takes a lock and builds a key on every call
            counter = DELIVERIES.labels(kind="webhook", outcome=decision.action)
            self._counted[decision.action] = counter
        counter.inc()
        # `webhook_endpoint_failing` is not set here: the gauge collector recomputes it from
        # Postgres before each scrape and removes deleted subscriptions' series; set per
        # attempt, a worker kept one series per subscription it ever saw, deleted or not.
        # Written by the recorder, outside the attempt's context: the ids are passed.
        if (
            decision.action == "delivered"
            and disabled_reason is None
            and not log.is_enabled_for(logging.INFO)
        ):
            return  # the common case, with info filtered out: nothing to build
        fields = {
            **_ids(outcome.finished.delivery),
            "status_code": outcome.finished.status_code,
            "latency_ms": round(outcome.finished.latency_ms, 1),
        }
        if decision.action == "delivered":
            log.info("webhook_delivered", **fields)
        elif decision.action == "retry":
            log.info(
                "webhook_retry_scheduled", delay=decision.delay, reason=decision.reason, **fields
            )
        else:
            log.warning("webhook_delivery_failed", reason=decision.reason, **fields)
        if disabled_reason is not None:
            log.warning("webhook_endpoint_failing", reason=disabled_reason, disabled=True, **fields)
            self._waker.notify(SubscriptionsChanged())


def _record_failed(exc: BaseException, action: str, delivery: store.ClaimedDelivery) -> None:
    """An outcome that could not be written: the claim expires with its lease and the
    delivery is attempted again."""
    log.warning("webhook_record_failed", error=str(exc), outcome=action, **_ids(delivery))


def _ids(delivery: store.ClaimedDelivery) -> dict[str, Any]:
    """The ids every log line about an attempt carries."""
    return {
        "event_id": delivery.event_id,
        "subscription_id": delivery.subscription_id,
        "delivery_id": delivery.id,
        "attempt": delivery.attempt,
    }


@dataclass(frozen=True, slots=True)
class _Outcome:
    """A finished attempt on its way to the batched write."""

    finished: store.FinishedAttempt
    decision: Decision
    #: the endpoint whose slot this failed attempt keeps until written (None: none kept)
    held: str | None


class _ClaimLost(Exception):
    """The delivery's claim was taken over (lease expired); this attempt's result is dropped."""
