"""`WebhookDispatcher`: claims due webhook deliveries and POSTs them, one attempt each.

Owns the delivery loop and composes its parts: claiming (`claims.py`: `FOR UPDATE SKIP LOCKED`
under a lease that pushes `next_attempt_at` to the lease expiry, so a dispatcher that dies
mid-attempt loses the delivery to the next claimer: at-least-once), the concurrency slots
(`slots.py`), sending (`sending.py`: Standard Webhooks headers, the SSRF-guarded aiohttp
session, the attempt's timeout) and recording the attempt and its outcome (`recorder.py`).
Concurrency is bounded overall (`webhook_concurrency`) and per subscription endpoint
(`webhook_endpoint_concurrency`): a saturated endpoint's deliveries are not even claimed, so a
slow endpoint never takes the slots of others. Claims run ahead of the free slots into a small
buffer, so a freed slot starts its next delivery at once. The outcome rules live in
`outcomes.py`, signing in `signing.py`, SSRF in `ssrf.py`.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Final

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool, transaction
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import CH_DELIVERIES, Waker
from ripple.platform.errors import RippleError
from ripple.subscribers.webhooks import delivery_store as store
from ripple.subscribers.webhooks.claims import ClaimBuffer
from ripple.subscribers.webhooks.recorder import OutcomeRecorder
from ripple.subscribers.webhooks.sending import AttemptSender
from ripple.subscribers.webhooks.slots import Slots
from ripple.subscribers.webhooks.ssrf import AddressPolicy, Resolver, SystemResolver

__all__ = ["WebhookDispatcher"]

log = get_logger("ripple.webhooks")

#: Seconds between sweeps of deliveries whose subscription was deleted.
ORPHAN_SWEEP_EVERY: Final = 60.0


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
        self._stopping = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._last_orphan_sweep = 0.0
        self._slots = Slots(settings.webhook_concurrency, self._on_slot_freed)
        self._buffer = ClaimBuffer(pool, settings)
        self._recorder = OutcomeRecorder(pool, waker, settings, self._slots, self._buffer.purge)
        self._sender = AttemptSender(
            settings,
            self._slots,
            self._recorder,
            policy=AddressPolicy.from_cidrs(settings.webhook_allowed_networks),
            resolver=resolver or SystemResolver(),
            rng=rng or random.Random(),
        )
        #: bound once: the buffer hands each delivery it starts to this
        self._start = self._sender.start

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
                    self._buffer.expire()
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
        sender = self._sender
        started = sender.started
        try:
            while True:
                # Attempts that end while the claim runs free slots the claim did not see,
                # so "idle" needs an empty claim that started with nothing in flight.
                # Outcomes being written count too: a retry may be due as soon as it is; and
                # so do buffered deliveries and released ones (due again once released).
                busy = self._busy()
                self._slot_freed.clear()
                self._buffer.expire()
                claimed = await self._claim_round(raise_errors=True)
                if claimed:
                    continue
                if self._busy():
                    freed = asyncio.ensure_future(self._slot_freed.wait())
                    try:
                        await asyncio.wait(
                            {
                                *sender.claims,
                                *self._recorder.writers,
                                *self._buffer.releasers,
                                freed,
                            },
                            timeout=self._wait_timeout(None),
                            return_when=asyncio.FIRST_COMPLETED,
                        )
                    finally:
                        freed.cancel()
                elif not busy:
                    # A rate-limited endpoint's due deliveries are not "idle": claim them when
                    # its limit lets the next one through.
                    wait = self._buffer.rate_wait()
                    if wait is None:
                        return sender.started - started
                    await asyncio.sleep(wait)
        finally:
            self._buffer.release_all()
            if sender.claims:
                await asyncio.gather(*sender.claims, return_exceptions=True)
            await self._buffer.released()
            await self._recorder.recorded()
            await self.aclose()

    def _busy(self) -> bool:
        return bool(
            self._sender.claims
            or self._recorder.writers
            or len(self._buffer)
            or self._buffer.releasers
        )

    def _wait_timeout(self, default: float | None) -> float | None:
        """How long the loop may wait (see `ClaimBuffer.wait_timeout`)."""
        return self._buffer.wait_timeout(default, self._slots.free(), self._slots.busy())

    async def aclose(self) -> None:
        """Close the HTTP session (its keep-alive connections)."""
        await self._sender.aclose()

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
        self._buffer.release_all()
        sender = self._sender
        if sender.claims:
            _done, pending = await asyncio.wait(
                set(sender.claims), timeout=self._settings.shutdown_grace
            )
            claims = [sender.claims[t] for t in pending if t in sender.claims]
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
            # Outcomes already handed to the recorder are written before the rest is released.
            await self._recorder.recorded()
            await self._buffer.release(claims)
        await self._buffer.released()
        await self._recorder.recorded()
        await self.aclose()

    # -- claiming and starting ---------------------------------------------------------------

    async def _claim_round(self, *, raise_errors: bool = False) -> int:
        slots = self._slots
        claimed = await self._buffer.claim(
            slots.free(), slots.busy(), slots.in_flight, raise_errors=raise_errors
        )
        if claimed is None:
            return 0
        self._start_buffered()
        return claimed

    def _start_buffered(self) -> None:
        """Start buffered deliveries, oldest first, while slots are free; skip those whose
        endpoint is at its cap (started and held attempts), release stale ones."""
        self._buffer.expire()
        free = self._slots.free()
        if free <= 0 or self._stopping.is_set():
            return
        self._buffer.start_ready(free, self._slots.in_flight, self._start)

    def _on_slot_freed(self) -> None:
        self._start_buffered()
        self._slot_freed.set()

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
