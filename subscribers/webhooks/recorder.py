"""`OutcomeRecorder`: writing finished webhook attempts and what follows from them.

Finished attempts gather and are written together, one statement per batch
(`delivery_store.finish_attempts`), by at most MAX_RECORDERS writers; an attempt that disables
its endpoint is written at once, in one transaction with the disabling. After the write it logs
a lost claim, disables an endpoint that failed for `webhook_disable_after` (releasing its
buffered deliveries), counts the outcome and gives back a failed attempt's held slot. The
outcome rules themselves live in `outcomes.py`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool, map_errors, transaction
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import SubscriptionsChanged, Waker
from ripple.platform.errors import RippleError
from ripple.platform.events import subscription_store
from ripple.platform.ops import metrics
from ripple.subscribers.webhooks import delivery_store as store
from ripple.subscribers.webhooks.outcomes import Decision
from ripple.subscribers.webhooks.slots import Slots

if TYPE_CHECKING:
    from prometheus_client import Counter

__all__ = ["OutcomeRecorder"]

log = get_logger("ripple.webhooks")

#: Batched writes of finished attempts in flight at once (each holds one pooled connection).
#: One: attempts that finish during a write go into the next, bigger batch. A delivered
#: attempt's slot is free before its write, so the wait holds no delivery back; more writers
#: only made more, smaller batches.
MAX_RECORDERS: Final = 1


class OutcomeRecorder:
    """Writes finished attempts in batches; disables endpoints that keep failing.

    Args:
        pool: the Postgres pool.
        waker: told when a subscription is disabled.
        settings: `webhook_disable_after`.
        slots: the dispatcher's slots (a failed attempt's is held until it is written).
        purge: releases a disabled endpoint's buffered deliveries.
    """

    def __init__(
        self,
        pool: Pool,
        waker: Waker,
        settings: Settings,
        slots: Slots,
        purge: Callable[[str], None],
    ) -> None:
        self._pool = pool
        self._waker = waker
        self._settings = settings
        self._slots = slots
        self._purge = purge
        self._breaker = store.Breaker(
            settings.webhook_circuit_failures, settings.webhook_circuit_probe_interval
        )
        #: finished attempts waiting for the next batched write, and the tasks writing them
        self._unrecorded: list[_Outcome] = []
        self.writers: set[asyncio.Task[None]] = set()
        #: the DELIVERIES counter of each outcome (labelled once)
        self._counted: dict[str, Counter] = {}

    async def record(
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
            held = self._slots.hold(asyncio.current_task())
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
                    conn, [outcome.finished], self._settings.webhook_disable_after, self._breaker
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

    async def recorded(self) -> None:
        """Wait until every finished attempt handed over is written."""
        self._ensure_writer()
        while self.writers:
            await asyncio.gather(*self.writers, return_exceptions=True)
            self._ensure_writer()

    def _ensure_writer(self) -> None:
        """Start a writer for the handed-over outcomes unless enough are running.

        Counted by done(), not by membership: a writer that just found nothing left and
        returned stays in the set until its done-callback runs, and an outcome handed over in
        between must still get a writer (else it waits for the next attempt's).
        """
        if self._unrecorded and sum(not t.done() for t in self.writers) < MAX_RECORDERS:
            task = asyncio.create_task(self._record_batches(), name="webhook-recorder")
            self.writers.add(task)
            task.add_done_callback(self.writers.discard)

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
                                self._breaker,
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
                        self._slots.release_held(o.held)

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
        self._purge(sub)
        if not await store.disable_subscription(conn, sub, reason):
            return None
        await subscription_store.bump_version(conn)
        return reason

    def _observe(self, outcome: _Outcome, disabled_reason: str | None) -> None:
        decision = outcome.decision
        counter = self._counted.get(decision.action)
        if counter is None:  # labels() takes a lock and builds a key on every call
            counter = metrics.DELIVERIES.labels(kind="webhook", outcome=decision.action)
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
