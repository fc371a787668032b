"""The subscription cache's change listener is registered once and unregistered on close."""

from __future__ import annotations

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.wake import CH_SUBSCRIPTIONS


async def test_subscriptions__close_unregisters_the_change_listener(settings: Settings) -> None:
    client = await Client(settings=settings).connect()
    waker = client.waker
    registry = waker._listeners  # the waker's registrations by channel
    try:
        await client.subscriptions.compiled()
        await client.subscriptions.compiled()
        assert len(registry.get(CH_SUBSCRIPTIONS, ())) == 1
        await client.subscriptions.close()
        assert not registry.get(CH_SUBSCRIPTIONS)
        await client.subscriptions.compiled()  # a later read registers it again
        assert len(registry.get(CH_SUBSCRIPTIONS, ())) == 1
    finally:
        await client.close()
    assert not registry.get(CH_SUBSCRIPTIONS)
