"""`ClaimBuffer`: claiming due webhook deliveries ahead of the free slots, and giving claims back.

A claim (`delivery_store.claim_due`: `FOR UPDATE SKIP LOCKED` under a lease that pushes
`next_attempt_at` to the lease expiry) takes what the free slots and the buffer's free room
allow, in batches while attempts are in flight (REFILL_SHARE, REFILL_WAIT). Claimed deliveries
wait here, oldest first, until a slot is free (BUFFER_SHARE, ENDPOINT_BUFFER_SHARE): buffered
deliveries hold their claim but no slot. A delivery buffered past BUFFER_MAX_AGE, one whose
endpoint is being disabled and all of them at shutdown are released unsent (due again, the
claim's attempt count given back). It sends nothing: `start_ready` hands deliveries to a starter.
"""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from typing import Final

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool, map_errors
from ripple.platform.core.logs import get_logger
from ripple.platform.errors import RippleError
from ripple.subscribers.webhooks import delivery_store as store

__all__ = ["LEASE_MARGIN", "REFILL_WAIT", "ClaimBuffer"]

log = get_logger("ripple.webhooks")

#: Seconds a claim outlives the attempt's timeout before another dispatcher may take over.
LEASE_MARGIN: Final = 10.0
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


class ClaimBuffer:
    """Claimed, not yet started deliveries, and the claims that fill it.

    Args:
        pool: the Postgres pool.
        settings: concurrency limits, the default attempt timeout, the poll interval.
    """

    def __init__(self, pool: Pool, settings: Settings) -> None:
        self._pool = pool
        self._settings = settings
        self._refill_at = max(1, int(settings.webhook_concurrency * REFILL_SHARE))
        #: claimed, not yet started deliveries with the monotonic time their claim was sent,
        #: oldest first (a claim appends; starts and purges keep the order)
        self._buffer: collections.deque[tuple[float, store.ClaimedDelivery]] = collections.deque()
        #: buffered deliveries per endpoint (they count toward the endpoint's claim limit)
        self._buffered: dict[str, int] = {}
        self._size = max(1, int(settings.webhook_concurrency * BUFFER_SHARE))
        self._endpoint_buffer = max(
            1,
            min(
                int(settings.webhook_endpoint_concurrency * ENDPOINT_BUFFER_SHARE),
                self._size,
            ),
        )
        #: tasks giving unsent claims back (stale, purged or shut down)
        self.releasers: set[asyncio.Task[None]] = set()
        self._claimed_at = float("-inf")
        #: when (monotonic) a rate-limited endpoint may have its next delivery (None: none waits)
        self._rate_at: float | None = None

    def __len__(self) -> int:
        return len(self._buffer)

    def _wanted(self, free: int) -> int:
        """Deliveries a claim may take now: the `free` slots and the buffer's free room."""
        return free + self._size - len(self._buffer)

    def _deferring(self, wanted: int, sending: bool) -> bool:
        """What a claim may take (`wanted`) waits for a batch (see REFILL_SHARE) and the wait
        has not run out; `sending`: whether attempts hold slots."""
        return (
            (sending or bool(self._buffer))
            and 0 < wanted < self._refill_at
            and time.monotonic() - self._claimed_at < REFILL_WAIT
        )

    def wait_timeout(self, default: float | None, free: int, sending: bool) -> float | None:
        """How long the dispatcher may wait: a deferred refill's wait, at most until the
        oldest buffered delivery goes stale (it is released then)."""
        timeout = REFILL_WAIT if self._deferring(self._wanted(free), sending) else default
        rate = self.rate_wait()
        if rate is not None:
            timeout = rate if timeout is None else min(timeout, rate)
        if self._buffer:
            expiry = max(0.0, self._buffer[0][0] + BUFFER_MAX_AGE - time.monotonic())
            timeout = expiry if timeout is None else min(timeout, expiry)
        return timeout

    def rate_wait(self) -> float | None:
        """Seconds until a rate-limited endpoint may have its next delivery (None: none waits)."""
        if self._rate_at is None:
            return None
        return max(0.0, self._rate_at - time.monotonic())

    async def claim(
        self, free: int, sending: bool, in_flight: dict[str, int], *, raise_errors: bool
    ) -> int | None:
        """Claim into the buffer what `free` slots and its room allow; the number claimed, or
        None if no claim ran (nothing wanted, a deferred refill, or a failure not raised).

        `in_flight`: the slots taken per endpoint (they count toward its claim limit).
        """
        wanted = self._wanted(free)
        if wanted <= 0 or self._deferring(wanted, sending):
            return None
        claimed_at = self._claimed_at = time.monotonic()
        # An endpoint's buffered deliveries count toward its claim limit (so one endpoint
        # buffers at most `_endpoint_buffer` beyond its own slots); only the started ones
        # count toward its HTTP cap (`start_ready`).
        counts = dict(in_flight)
        for sub, n in self._buffered.items():
            counts[sub] = counts.get(sub, 0) + n
        try:
            with map_errors():
                async with self._pool.acquire() as conn:
                    claim = await store.claim_due(
                        conn,
                        limit=wanted,
                        endpoint_limit=self._settings.webhook_endpoint_concurrency
                        + self._endpoint_buffer,
                        in_flight=counts,
                        default_timeout=self._settings.webhook_timeout,
                        lease_margin=LEASE_MARGIN,
                        probe_interval=self._settings.webhook_circuit_probe_interval,
                    )
        except RippleError as exc:
            if raise_errors:
                raise
            log.warning("webhook_claim_failed", error=str(exc))
            await asyncio.sleep(self._settings.poll_interval)
            return None
        claimed = claim.deliveries
        self._rate_at = None if claim.rate_wait is None else time.monotonic() + claim.rate_wait
        buffered = self._buffered
        for delivery in claimed:
            sub = delivery.subscription_id
            buffered[sub] = buffered.get(sub, 0) + 1
            self._buffer.append((claimed_at, delivery))
        return len(claimed)

    def start_ready(
        self,
        free: int,
        in_flight: dict[str, int],
        start: Callable[[store.ClaimedDelivery], None],
    ) -> None:
        """Hand buffered deliveries to `start`, oldest first, while `free` slots last; skip
        those whose endpoint is at its cap (`in_flight`: started and held attempts)."""
        cap = self._settings.webhook_endpoint_concurrency
        buffer = self._buffer
        i = 0
        while free > 0 and i < len(buffer):
            delivery = buffer[i][1]
            sub = delivery.subscription_id
            if in_flight.get(sub, 0) >= min(cap, delivery.target.get("maxInFlight", cap)):
                i += 1
                continue
            del buffer[i]
            self._unbuffer(sub)
            start(delivery)
            free -= 1

    def _unbuffer(self, sub: str) -> None:
        left = self._buffered[sub] - 1
        if left:
            self._buffered[sub] = left
        else:
            del self._buffered[sub]

    def expire(self) -> None:
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

    def purge(self, sub: str) -> None:
        """Release the endpoint's buffered deliveries (it is being disabled: none is sent)."""
        if sub not in self._buffered:
            return
        dropped = [d for _, d in self._buffer if d.subscription_id == sub]
        self._buffer = collections.deque(i for i in self._buffer if i[1].subscription_id != sub)
        del self._buffered[sub]
        self._give_back(dropped)

    def release_all(self) -> None:
        """Release every buffered delivery (shutdown)."""
        dropped = [d for _, d in self._buffer]
        self._buffer.clear()
        self._buffered.clear()
        self._give_back(dropped)

    def _give_back(self, claims: list[store.ClaimedDelivery]) -> None:
        """Release never-sent claims in the background (`released` waits for it)."""
        if not claims:
            return
        task = asyncio.create_task(self.release(claims, attempted=False), name="webhook-release")
        self.releasers.add(task)
        task.add_done_callback(self.releasers.discard)

    async def release(self, claims: list[store.ClaimedDelivery], *, attempted: bool = True) -> None:
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

    async def released(self) -> None:
        """Wait until every unsent claim handed back is released."""
        while self.releasers:
            await asyncio.gather(*self.releasers, return_exceptions=True)
