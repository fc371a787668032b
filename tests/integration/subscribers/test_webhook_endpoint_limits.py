"""Webhook endpoint limits against real local sinks: the in-flight cap and the rate limit hold
across dispatchers, and a slow endpoint never delays another on the same host."""

from __future__ import annotations

import asyncio
import bisect
import time
import uuid
from datetime import UTC, datetime

import pytest

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool, transaction
from ripple.platform.core.ids import new_id
from ripple.platform.core.wake import NullWaker
from ripple.platform.errors import NotFound
from ripple.platform.events.fanout import PublishedEvent, SubscriptionRow
from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher
from ripple.subscribers.webhooks.webhook import Deliveries
from tests.integration.subscribers.conftest import Hooks
from tests.integration.subscribers.webhook_sink import Received, Reply, Sink


async def publish_many(hooks: Hooks, subs: list[SubscriptionRow], count: int) -> None:
    """`count` events fanned out to `subs` in one transaction (a burst)."""
    now = datetime.now(UTC)
    events = [
        PublishedEvent(event_id=new_id(), topic="t.burst", payload={"n": n}, created_at=now)
        for n in range(count)
    ]
    async with transaction(hooks.pool) as conn:
        await hooks.kind.fan_out(conn, [(event, subs) for event in events])


def most_in_any_window(times: list[float], window: float) -> int:
    """The most arrivals within any half-open interval of `window` seconds."""
    times = sorted(times)
    return max(bisect.bisect_left(times, t + window) - i for i, t in enumerate(times))


async def test_rate_limited_endpoint__receives_at_most_its_rate_in_any_second_after_a_burst(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    arrivals: list[float] = []

    def record(_req: Received, _n: int) -> Reply:
        arrivals.append(time.monotonic())
        return Reply()

    wide = hook_settings.model_copy(update={"webhook_endpoint_concurrency": 8})
    async with Sink(record) as sink:
        sub = await hooks.subscribe(
            sink.url(), maxInFlight=10, rateLimit={"limit": 100, "perSeconds": 1}
        )
        await publish_many(hooks, [sub], 500)
        # Two dispatchers share the endpoint's budget (it is held in Postgres).
        first = WebhookDispatcher(pool, NullWaker(), wide)
        second = WebhookDispatcher(pool, NullWaker(), wide)
        await asyncio.wait_for(asyncio.gather(first.run_until_idle(), second.run_until_idle()), 25)

    assert len(arrivals) == 500
    assert most_in_any_window(arrivals, 1.0) <= 100
    statuses = {row["status"] for row in await hooks.deliveries(sub)}
    assert statuses == {"delivered"}


async def test_in_flight_cap__holds_across_dispatchers(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    current = peak = 0

    async def slow(_req: Received, _n: int) -> Reply:
        nonlocal current, peak
        current += 1
        peak = max(peak, current)
        await asyncio.sleep(0.05)  # the endpoint's latency, so requests overlap
        current -= 1
        return Reply()

    wide = hook_settings.model_copy(update={"webhook_endpoint_concurrency": 8})
    async with Sink(slow) as sink:
        sub = await hooks.subscribe(sink.url(), maxInFlight=3)
        await publish_many(hooks, [sub], 40)
        first = WebhookDispatcher(pool, NullWaker(), wide)
        second = WebhookDispatcher(pool, NullWaker(), wide)
        await asyncio.wait_for(asyncio.gather(first.run_until_idle(), second.run_until_idle()), 25)
        received = len(sink.received)

    assert received == 40
    assert peak == 3  # reached, never passed (each dispatcher alone would allow 8)


async def test_circuit_breaker__opens_after_failures_in_a_row_probes_once_and_resumes(
    pool: Pool, hook_settings: Settings, hooks: Hooks, ops: Deliveries
) -> None:
    healthy = False

    def flaky(_req: Received, _n: int) -> Reply:
        return Reply(204 if healthy else 500)

    settings = hook_settings.model_copy(
        update={"webhook_circuit_failures": 3, "webhook_circuit_probe_interval": 3600.0}
    )
    retry_at_once = {"maxAttempts": 100, "initialInterval": 0, "jitter": 0}
    async with Sink(flaky) as broken, Sink() as fine:
        broken_sub = await hooks.subscribe(broken.url(), maxInFlight=1, retry=retry_at_once)
        fine_sub = await hooks.subscribe(fine.url())
        await publish_many(hooks, [broken_sub, fine_sub], 5)

        # Three failures in a row open the circuit: nothing more is sent to it, while the
        # other endpoint gets everything.
        await WebhookDispatcher(pool, NullWaker(), settings).run_until_idle()
        assert len(broken.received) == 3
        assert len(fine.received) == 5
        health = await ops.endpoint(broken_sub.id)
        assert (health.circuit, health.consecutive_failures) == ("open", 3)
        assert health.next_probe_at is not None

        # Its probe time comes (moved in SQL instead of waiting): exactly one probe goes; it
        # fails, so the circuit stays open until the next probe time.
        await pool.execute(
            "UPDATE ripple_webhook_health SET circuit_open_until = now() "
            "WHERE subscription_id = $1",
            uuid.UUID(broken_sub.id),
        )
        await WebhookDispatcher(pool, NullWaker(), settings).run_until_idle()
        assert len(broken.received) == 4
        health = await ops.endpoint(broken_sub.id)
        assert (health.circuit, health.consecutive_failures) == ("open", 4)

        # "Resume now": closed, and every waiting delivery goes at once.
        healthy = True
        resumed = await ops.resume_endpoint(broken_sub.id)
        assert (resumed.circuit, resumed.consecutive_failures) == ("closed", 0)
        await WebhookDispatcher(pool, NullWaker(), settings).run_until_idle()
    assert {r["status"] for r in await hooks.deliveries(broken_sub)} == {"delivered"}
    assert (await ops.endpoint(broken_sub.id)).circuit == "closed"


async def test_resume_endpoint__of_an_unknown_subscription_is_not_found(ops: Deliveries) -> None:
    with pytest.raises(NotFound):
        await ops.resume_endpoint(str(uuid.uuid4()))
    with pytest.raises(NotFound):
        await ops.endpoint("not-a-uuid")


async def test_run_until_idle__returns_once_a_rate_limited_endpoint_has_nothing_due(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    """A rate schedule that is still closed but has no due delivery behind it is no reason to
    wait: the claim's rate wait counts only endpoints with something due."""
    async with Sink() as sink:
        sub = await hooks.subscribe(sink.url(), rateLimit={"limit": 1, "perSeconds": 60})
        await publish_many(hooks, [sub], 1)
        dispatcher = WebhookDispatcher(pool, NullWaker(), hook_settings)
        started = time.monotonic()
        assert await asyncio.wait_for(dispatcher.run_until_idle(), 30) == 1
        assert time.monotonic() - started < 10
    statuses = {row["status"] for row in await hooks.deliveries(sub)}
    assert statuses == {"delivered"}
