"""Endpoint isolation: a slow endpoint's backlog never delays another endpoint on the same host.

The latency itself is measured by `python -m bench --only webhooks`; here it is only bounded,
generously, far below the slow endpoint's answer time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.subscribers import WebhookTarget
from tests.helpers import assert_eventually
from tests.integration.subscribers.webhook_sink import Received, Reply, Sink

#: How long the slow endpoint takes to answer.
SLOW_ANSWER = 5.0
#: A fast delivery that waited for a slow one would take at least SLOW_ANSWER.
BOUND = SLOW_ANSWER / 2


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # The defaults of a worker, loopback admitted, no grace at shutdown (slow attempts are
    # abandoned when the test ends).
    return settings.model_copy(
        update={"webhook_allowed_networks": ["127.0.0.0/8"], "shutdown_grace": 0.0}
    )


async def test_slow_endpoint__300_deliveries_do_not_delay_another_endpoint_on_the_same_host(
    client: Client,
) -> None:
    released = asyncio.Event()
    fast_at: dict[int, float] = {}

    async def respond(req: Received, _n: int) -> Reply:
        if req.path == "/slow":
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(released.wait(), SLOW_ANSWER)
        else:
            fast_at[json.loads(req.body)["data"]["n"]] = time.monotonic()
        return Reply()

    async with Sink(respond) as sink:
        await client.subscribe("slow.#", WebhookTarget(sink.url("/slow")))
        await client.subscribe("fast.#", WebhookTarget(sink.url("/fast")))
        (dispatcher,) = [
            s
            for s in client.background_services(webhooks=True, sweeper=False)
            if s.name == "webhook-dispatcher"
        ]
        task = asyncio.create_task(dispatcher.run())
        try:
            for start in range(0, 300, 100):
                await asyncio.gather(
                    *(client.publish("slow.event", {"n": n}) for n in range(start, start + 100))
                )
            published: dict[int, float] = {}
            for n in range(20):
                published[n] = time.monotonic()
                await client.publish("fast.event", {"n": n})
                await assert_eventually(lambda: len(fast_at) == len(published), timeout=10)
            slow_received = sum(1 for r in sink.received if r.path == "/slow")
        finally:
            released.set()
            dispatcher.stop()
            await asyncio.wait_for(task, 15)

    latencies = [fast_at[n] - published[n] for n in published]
    assert max(latencies) < BOUND, latencies
    # The slow endpoint had its deliveries in flight (its in-flight cap) all along.
    assert 1 <= slow_received <= 10
