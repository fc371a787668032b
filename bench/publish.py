"""Publish benchmark: events/s with fan-out to a queue, a workflow and a webhook.

Baseline: bare asyncpg writing the same rows (event, queue message, run, delivery) in the
shape of Ripple's group commit: 3 concurrent transactions of up to 200 events, one statement
per table.
"""

from __future__ import annotations

import asyncio
import socket
import time

from bench.bare_pg import publish_rows
from bench.common import bench_database, report_vs, subprocess_module, write_xacts
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
        bare = await publish_rows(db.url, EVENTS)
    report_vs(
        "publish throughput (queue+workflow+webhook)",
        EVENTS / elapsed,
        bare,
        "events/s",
        f"{EVENTS} events in {elapsed:.2f} s, {PUBLISHERS} publishers, "
        f"{(after - before - 1) / EVENTS:.2f} write xact/event, {deliveries} queue+workflow rows",
    )
