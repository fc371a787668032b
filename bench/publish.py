"""Publish benchmark (issue 5): events/s with fan-out to a queue, a workflow and a webhook."""

from __future__ import annotations

import asyncio
import socket
import time

from bench.common import bench_database, report, subprocess_module, write_xacts
from ripple.platform.client import Client
from ripple.subscribers import QueueTarget, WebhookTarget, WorkflowTarget

EVENTS = 5000
PUBLISHERS = 32


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def run() -> None:
    port = free_port()
    async with (
        bench_database(webhook_allowed_networks=["127.0.0.0/8"]) as db,
        Client(settings=db.settings) as client,
        subprocess_module("bench.sink", str(port)),
    ):
        await client.subscribe("bench.#", QueueTarget("bench-audit"))
        await client.subscribe("bench.*", WorkflowTarget("one-step"))
        await client.subscribe("bench.event", WebhookTarget(f"http://127.0.0.1:{port}/hook"))
        await client.publish("bench.warmup", {"n": -1})
        before = await write_xacts()
        counter = iter(range(EVENTS))

        async def publisher() -> None:
            for n in counter:
                await client.publish("bench.event", {"n": n, "user": {"id": n, "plan": "pro"}})

        started = time.perf_counter()
        await asyncio.gather(*(publisher() for _ in range(PUBLISHERS)))
        elapsed = time.perf_counter() - started
        after = await write_xacts()
        deliveries = await client.pool.fetchval(
            "SELECT (SELECT count(*) FROM ripple_queue_messages) +"
            " (SELECT count(*) FROM ripple_runs)"
        )
    report(
        "publish throughput (queue+workflow+webhook)",
        f"{EVENTS / elapsed:,.0f} events/s ({EVENTS} events in {elapsed:.2f} s, "
        f"{PUBLISHERS} publishers, {(after - before - 1) / EVENTS:.2f} write xact/event, "
        f"{deliveries} queue+workflow rows)",
    )
