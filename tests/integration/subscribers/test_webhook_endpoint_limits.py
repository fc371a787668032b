"""Webhook endpoint limits against real local sinks: the in-flight cap and the rate limit hold
across dispatchers, and a slow endpoint never delays another on the same host."""

from __future__ import annotations

import asyncio
import bisect
import time
from datetime import UTC, datetime

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool, transaction
from ripple.platform.core.ids import new_id
from ripple.platform.core.wake import NullWaker
from ripple.platform.events.fanout import PublishedEvent, SubscriptionRow
from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher
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
