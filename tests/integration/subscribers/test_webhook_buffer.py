"""The dispatcher's buffer of claimed deliveries: freed slots start them without a claim, and
buffered deliveries are bounded per endpoint, released when stale or on stop (never sent late),
and purged when their endpoint is disabled (real sockets to local sinks)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool
from ripple.platform.core.wake import NullWaker
from ripple.platform.events.fanout import SubscriptionRow
from ripple.subscribers.webhooks import claims
from ripple.subscribers.webhooks import delivery_store as store
from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher
from tests.helpers import assert_eventually
from tests.integration.subscribers.conftest import Hooks
from tests.integration.subscribers.webhook_sink import Reply, Sink, signal_on


def _slots(hook_settings: Settings, overall: int, endpoint: int) -> Settings:
    return hook_settings.model_copy(
        update={"webhook_concurrency": overall, "webhook_endpoint_concurrency": endpoint}
    )


async def _claimed(hooks: Hooks, sub: SubscriptionRow) -> dict[str, uuid.UUID]:
    """The endpoint's deliveries under a claim: id -> claim token."""
    return {
        str(r["id"]): r["claim_token"]
        for r in await hooks.deliveries(sub)
        if r["claim_token"] is not None
    }


def _sent_ids(sink: Sink) -> set[str]:
    return {str(uuid.UUID(r.headers["webhook-id"].removeprefix("msg_"))) for r in sink.received}


@contextlib.asynccontextmanager
async def _hung_endpoint(
    pool: Pool, settings: Settings, hooks: Hooks
) -> AsyncIterator[tuple[Sink, SubscriptionRow]]:
    """Six deliveries to an endpoint that never answers, a dispatcher running with two slots
    (both sending to it once this yields); the dispatcher is stopped on the way out."""
    slow = Sink.hung()
    async with slow:
        sub = await hooks.subscribe(slow.url(), timeout=120)
        for _ in range(6):
            await hooks.publish([sub])
        d = WebhookDispatcher(pool, NullWaker(), settings)
        task = asyncio.create_task(d.run())
        try:
            await assert_eventually(lambda: len(slow.received) == 2, timeout=20)
            yield slow, sub
        finally:
            d.stop()
            await asyncio.wait_for(task, 15)


async def test_webhook_buffer__a_freed_slot_starts_a_buffered_delivery_without_a_claim(
    pool: Pool, hook_settings: Settings, hooks: Hooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One slot. Every claim after the first waits until both deliveries were sent: the second
    # can only have come from the buffer the first claim filled.
    settings = _slots(hook_settings, overall=1, endpoint=1)
    claim_due = store.claim_due
    claims = 0
    both_sent = asyncio.Event()

    async def first_claim_only(conn: Connection, **kw: Any) -> store.Claim:
        nonlocal claims
        claims += 1
        if claims > 1:
            await both_sent.wait()
        return await claim_due(conn, **kw)

    monkeypatch.setattr(store, "claim_due", first_claim_only)

    async with Sink(signal_on(both_sent, 2)) as sink:
        sub = await hooks.subscribe(sink.url())
        await hooks.publish([sub])
        await hooks.publish([sub])
        run = asyncio.create_task(WebhookDispatcher(pool, NullWaker(), settings).run_until_idle())
        try:
            await asyncio.wait_for(both_sent.wait(), 20)
        finally:
            both_sent.set()  # a failing run must not leave the claim waiting
        # idle only once nothing is buffered, in flight or being written
        assert await asyncio.wait_for(run, 20) == 2
    assert [r["status"] for r in await hooks.deliveries(sub)] == ["delivered", "delivered"]


async def test_webhook_buffer__stop_releases_buffered_deliveries_unsent(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    # Two slots, both held by a hung endpoint; its four other deliveries wait in the buffer
    # (its share: twice its cap).
    settings = _slots(hook_settings, overall=2, endpoint=2)
    async with _hung_endpoint(pool, settings, hooks) as (slow, sub):

        async def all_claimed() -> bool:
            return len(await _claimed(hooks, sub)) == 6

        await assert_eventually(all_claimed, timeout=20)
    rows = await hooks.deliveries(sub)
    assert len(slow.received) == 2  # the buffered ones were not sent on the way out
    assert {r["status"] for r in rows} == {"pending"}
    assert all(r["claim_token"] is None for r in rows)
    # the two cancelled attempts stay counted; the buffered claims were given back uncounted
    assert sorted(r["attempts"] for r in rows) == [0, 0, 0, 0, 1, 1]


async def test_webhook_buffer__stale_buffered_deliveries_are_released_not_sent_late(
    pool: Pool, hook_settings: Settings, hooks: Hooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claims, "BUFFER_MAX_AGE", 0.2)
    settings = _slots(hook_settings, overall=2, endpoint=2)
    async with _hung_endpoint(pool, settings, hooks) as (slow, sub):

        async def buffered() -> dict[str, uuid.UUID]:
            claimed = await _claimed(hooks, sub)
            unsent = {i: t for i, t in claimed.items() if i not in _sent_ids(slow)}
            return unsent if len(unsent) == 4 else {}

        first = await assert_eventually(buffered, timeout=20)

        async def released() -> bool:
            # every stale claim was given back (and claimed again, under a new token)
            now = {str(r["id"]): r["claim_token"] for r in await hooks.deliveries(sub)}
            return all(now[i] != token for i, token in first.items())

        await assert_eventually(released, timeout=20)
        assert len(slow.received) == 2  # stale deliveries are released, never sent late
    rows = await hooks.deliveries(sub)
    assert all(r["claim_token"] is None for r in rows)
    # each release gave its claim's attempt back: only the two sent attempts count
    assert sorted(r["attempts"] for r in rows) == [0, 0, 0, 0, 1, 1]


async def test_webhook_buffer__endpoint_cap_bounds_exchanges_and_its_share_of_the_buffer(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    # 8 slots, 2 per endpoint: the hung endpoint has its 2 exchanges and at most 4 buffered
    # deliveries (its share: twice its cap), and the other endpoint's deliveries all go
    # through meanwhile.
    settings = _slots(hook_settings, overall=8, endpoint=2)
    slow = Sink.hung()
    async with slow, Sink() as fast:
        slow_sub = await hooks.subscribe(slow.url(), timeout=120)
        fast_sub = await hooks.subscribe(fast.url())
        for _ in range(10):
            await hooks.publish([slow_sub])
        d = WebhookDispatcher(pool, NullWaker(), settings)
        task = asyncio.create_task(d.run())
        try:

            async def slow_claimed() -> bool:
                return len(await _claimed(hooks, slow_sub)) == 6

            await assert_eventually(slow_claimed, timeout=20)
            for _ in range(20):
                await hooks.publish([fast_sub])

            async def fast_done() -> bool:
                rows = await hooks.deliveries(fast_sub)
                return all(r["status"] == "delivered" for r in rows)

            await assert_eventually(fast_done, timeout=20)
            assert len(fast.received) == 20
            assert len(slow.received) == 2
            assert len(await _claimed(hooks, slow_sub)) <= 6
        finally:
            d.stop()
            await asyncio.wait_for(task, 15)


async def test_webhook_buffer__a_disabled_endpoint_s_buffered_deliveries_are_not_sent(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    # One exchange at a time per endpoint: the first delivery is refused for good (410) while
    # the other two wait in the buffer; disabling the endpoint gives them back unsent.
    settings = _slots(hook_settings, overall=8, endpoint=1)
    async with Sink(lambda _r, _n: Reply(410)) as sink:
        sub = await hooks.subscribe(sink.url())
        for _ in range(3):
            await hooks.publish([sub])
        with capture_logs() as logs:
            await WebhookDispatcher(pool, NullWaker(), settings).run_until_idle()
    assert len(sink.received) == 1
    rows = await hooks.deliveries(sub)
    assert sorted(r["status"] for r in rows) == ["failed", "pending", "pending"]
    assert sorted(r["attempts"] for r in rows) == [0, 0, 1]
    assert all(r["claim_token"] is None for r in rows)
    released = [e for e in logs if e["event"] == "webhook_claims_released"]
    assert [(e["count"], e["attempted"]) for e in released] == [(2, False)]
