"""Publish benchmark: events/s with fan-out to a queue, a workflow and a webhook.

Baseline: bare asyncpg writing the same rows (event, queue message, run, delivery) in the
shape of Ripple's group commit: 3 concurrent transactions of up to 200 events, one statement
per table. Ripple reaches that shape only with as many publishes in flight (3 x 200), so it is
measured twice: with 32 publishers (groups of at most 32) and with 600 (the baseline's shape).

Typed topics: the same publish to a topic with a registered schema (validated first) and to
one without, alternated, as a ratio (the bar is 0.85).
"""

from __future__ import annotations

import asyncio
import socket
import time

from bench.bare_pg import publish_rows
from bench.common import bench_database, report, report_vs, subprocess_module, write_xacts
from ripple.platform.client import Client
from ripple.subscribers import QueueTarget, WebhookTarget, WorkflowTarget

#: Long enough that one full garbage collection of the bench process (with 600 publishes in
#: flight) is amortized instead of deciding the figure, as it did over a few thousand events.
EVENTS = 20_000
#: Publishes in flight: a few callers, and as many as the baseline's groups hold (3 x 200).
PUBLISHERS = (32, 600)
#: Events per round of the schema comparison, and rounds per topic (in ABBA order, so drift
#: in the machine's speed during the comparison falls on both alike).
TYPED_EVENTS = 2_000
TYPED_ROUNDS = 6
#: The payload schema of the typed topic (what pydantic emits for a model of this shape).
TYPED_SCHEMA = {
    "type": "object",
    "title": "BenchEvent",
    "properties": {
        "n": {"type": "integer", "minimum": 0},
        "user": {"$ref": "#/$defs/User"},
    },
    "required": ["n", "user"],
    "$defs": {
        "User": {
            "type": "object",
            "properties": {
                "id": {"type": "integer"},
                "plan": {"enum": ["free", "pro"]},
            },
            "required": ["id", "plan"],
        }
    },
}


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
        figures = []
        for publishers in PUBLISHERS:
            before = await write_xacts()
            elapsed = await _publish_all(client, publishers)
            figures.append((publishers, elapsed, await write_xacts() - before - 1))
        deliveries = await client.pool.fetchval(
            "SELECT (SELECT count(*) FROM ripple_queue_messages) +"
            " (SELECT count(*) FROM ripple_runs)"
        )
        typed, plain = await _schema_ratio(client)
        bare = await publish_rows(db.url, EVENTS)
    for publishers, elapsed, xacts in figures:
        report_vs(
            f"publish throughput, {publishers} publishers",
            EVENTS / elapsed,
            bare,
            "events/s",
            f"{EVENTS} events in {elapsed:.2f} s, {xacts / EVENTS:.2f} write xact/event "
            "(queue+workflow+webhook)",
        )
    print(f"{'':<44} ({deliveries} queue+workflow rows in all)", flush=True)
    (typed_rate, typed_cpu), (plain_rate, plain_cpu) = typed, plain
    report(
        "publish with a schema vs without",
        f"ratio {typed_rate / plain_rate:.2f} (bar 0.85): {typed_rate:,.0f} vs "
        f"{plain_rate:,.0f} events/s; client CPU {typed_cpu:.0f} vs {plain_cpu:.0f} us/event; "
        f"32 publishers, {TYPED_ROUNDS} rounds of {TYPED_EVENTS} each, totals",
    )


async def _schema_ratio(client: Client) -> tuple[tuple[float, float], tuple[float, float]]:
    """(events/s, client CPU us per event) publishing to a topic with a schema and to one
    without, same fan-out; rounds interleaved ABBA."""
    await client.topics.register_schema("bench.typed", TYPED_SCHEMA)
    wall = {"bench.typed": 0.0, "bench.plain": 0.0}
    cpu = dict(wall)
    order = ["bench.typed", "bench.plain"]
    for round_ in range(TYPED_ROUNDS):
        for topic in order if round_ % 2 == 0 else order[::-1]:
            started = time.process_time()
            wall[topic] += await _publish_all(client, 32, topic, TYPED_EVENTS)
            cpu[topic] += time.process_time() - started
    events = TYPED_ROUNDS * TYPED_EVENTS
    return tuple(  # type: ignore[return-value]
        (events / wall[topic], cpu[topic] / events * 1e6) for topic in order
    )


async def _publish_all(
    client: Client, publishers: int, topic: str = "bench.event", events: int = EVENTS
) -> float:
    """Seconds `publishers` concurrent callers take to publish `events` events."""
    counter = iter(range(events))

    async def publisher() -> None:
        for n in counter:
            await client.publish(topic, {"n": n, "user": {"id": n, "plan": "pro"}})

    started = time.perf_counter()
    await asyncio.gather(*(publisher() for _ in range(publishers)))
    return time.perf_counter() - started
