"""A `Worker` composes its process's services through the `ProcessRunner`: by default it also
runs the webhook dispatcher (and delivers), and one failing service stops all the others."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.ops.runner import ProcessRunner
from ripple.subscribers import WebhookTarget
from ripple.workflows import Worker, WorkflowContext, workflow
from tests.helpers import assert_eventually
from tests.integration.subscribers.webhook_sink import Received, Reply, Sink


@workflow(name="tiny")
async def tiny(ctx: WorkflowContext, n: int) -> int:
    return int(await ctx.step.run("double", lambda: n * 2))


def accept(_r: Received, _n: int) -> Reply:
    return Reply(200)


async def test_worker__runs_the_webhook_dispatcher_unless_switched_off(
    hook_settings: Settings,
) -> None:
    async with Client(settings=hook_settings) as client, Sink(accept) as sink:
        off = Worker(client, [tiny], webhooks=False, sweeper=False)
        assert [s.name for s in off.services()] == ["workflow-executor", "scheduler"]

        worker = Worker(client, [tiny], concurrency=4)  # webhooks=True, sweeper=True
        names = [s.name for s in worker.services()]
        assert names == ["workflow-executor", "webhook-dispatcher", "sweeper", "scheduler"]
        await client.subscribe("order.*", WebhookTarget(sink.url()))
        async with worker:
            handle = await client.start(tiny, 21)
            event = await client.publish("order.placed", {"id": 7})
            assert event.deliveries == 1
            assert await handle.result(timeout=10) == 42
            await assert_eventually(lambda: len(sink.received) == 1, timeout=10)
        assert await client.pool.fetchval("SELECT count(*) FROM ripple_workers") == 0


class Crashing:
    """A service that fails as soon as it runs (a bug in a sibling of the worker)."""

    name = "crashing"

    def __init__(self) -> None:
        self.go = asyncio.Event()

    async def run(self) -> None:
        await self.go.wait()
        raise RuntimeError("crashed")

    def stop(self) -> None:
        self.go.set()


async def test_runner__a_failing_service_stops_the_worker_and_its_siblings(
    hook_settings: Settings,
) -> None:
    async with Client(settings=hook_settings) as client:
        worker = Worker(client, [tiny], concurrency=4, handle_signals=False)
        crashing = Crashing()
        runner = ProcessRunner([*worker.services(), crashing], handle_signals=False)
        with capture_logs() as logs:
            main = asyncio.create_task(runner.run())
            # the worker registered itself: it is running
            await assert_eventually(
                lambda: client.pool.fetchval("SELECT count(*) = 1 FROM ripple_workers"),
                timeout=10,
            )
            crashing.go.set()
            with pytest.raises(RuntimeError, match="crashed"):
                await asyncio.wait_for(main, 30)
        assert await client.pool.fetchval("SELECT count(*) FROM ripple_workers") == 0
    outcomes = {e["service"]: e["outcome"] for e in logs if e["event"] == "service_stopped"}
    assert outcomes == {
        "workflow-executor": "returned",
        "webhook-dispatcher": "returned",
        "sweeper": "returned",
        "scheduler": "returned",
        "crashing": "failed",
    }
    events = [e["event"] for e in logs]
    assert events.index("service_failed") < events.index("worker_stopped")
