"""CloudEvents benchmark: reading a batch (Ripple's strict check vs the official SDK) and batch
ingest through `ripple serve` (`POST /v1/events`, `application/cloudevents-batch+json`).

Reading: CPU per event to turn a parsed 100-event batch into checked events, by
`ripple.platform.events.cloudevents.parse_batch` and by the `cloudevents` SDK (its `CloudEvent`
constructor on the parsed attributes, and its JSON format reading each event's text). Ingest:
events/s with BATCHES_IN_FLIGHT batches of BATCH events in flight, one queue subscription, each
event new (its own `id`), so every one is written with its delivery.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import aiohttp

from bench.common import bench_database, cpu_seconds, report
from bench.publish import free_port
from bench.rest import serve
from ripple.platform.client import Client
from ripple.platform.events.cloudevents import BATCH_MEDIA_TYPE, parse_batch
from ripple.subscribers import QueueTarget

BATCH = 100
BATCHES = 150
BATCHES_IN_FLIGHT = 8
PARSE_ROUNDS = 200


def _events(count: int, run: str) -> list[dict[str, Any]]:
    return [
        {
            "specversion": "1.0",
            "id": f"{run}-{n}",
            "source": "https://shop.example.com/orders",
            "type": "bench.order.paid",
            "time": "2026-01-01T12:00:00Z",
            "subject": f"order-{n}",
            "datacontenttype": "application/json",
            "tenant": "acme",
            "data": {"orderId": n, "amount": 12.5, "currency": "EUR"},
        }
        for n in range(count)
    ]


def _per_event(fn: Callable[[], object]) -> float:
    """Best seconds per event of `fn` (one batch) over PARSE_ROUNDS rounds of five."""
    best = float("inf")
    for _ in range(PARSE_ROUNDS // 5):
        started = time.perf_counter()
        for _ in range(5):
            fn()
        best = min(best, (time.perf_counter() - started) / 5)
    return best / BATCH


def reading() -> None:
    from cloudevents.core.formats.json import JSONFormat
    from cloudevents.core.v1.event import CloudEvent

    events = _events(BATCH, "parse")
    texts = [json.dumps(e).encode() for e in events]
    fmt = JSONFormat()

    def sdk_objects() -> object:
        # The SDK's constructor takes `time` as a datetime: parsing it is part of its way.
        out = []
        for e in events:
            attributes = {k: v for k, v in e.items() if k != "data"}
            attributes["time"] = datetime.fromisoformat(attributes["time"])
            out.append(CloudEvent(attributes, e["data"]))
        return out

    def sdk_format() -> object:
        return [fmt.read(CloudEvent, text) for text in texts]

    ripple = _per_event(lambda: parse_batch(events))
    objects = _per_event(sdk_objects)
    from_text = _per_event(sdk_format)
    report(
        "CloudEvents batch check (per event)",
        f"Ripple {ripple * 1e6:.1f} µs; SDK CloudEvent() on parsed JSON {objects * 1e6:.1f} µs "
        f"({objects / ripple:.1f}x); SDK JSONFormat.read {from_text * 1e6:.1f} µs "
        f"({from_text / ripple:.1f}x, JSON decoding included)",
    )


async def ingest() -> None:
    port = free_port()
    async with bench_database() as db:
        async with Client(settings=db.settings) as client:
            await client.subscribe("bench.#", QueueTarget("bench-ce"))
        run = uuid.uuid4().hex[:8]
        bodies = [json.dumps(_events(BATCH, f"{run}-{b}")).encode() for b in range(BATCHES + 10)]
        headers = {"Content-Type": BATCH_MEDIA_TYPE}
        async with (
            serve(db, port) as (url, pid),
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as http,
        ):

            async def post(body: bytes) -> None:
                async with http.post(f"{url}/v1/events", data=body, headers=headers) as answer:
                    results = (await answer.json())["results"]
                    if answer.status != 202 or any("eventId" not in r for r in results):
                        raise RuntimeError(f"batch refused: {answer.status} {results[:1]}")

            for body in bodies[BATCHES:]:  # warm-up
                await post(body)
            pending = iter(bodies[:BATCHES])

            async def worker() -> None:
                for body in pending:
                    await post(body)

            cpu = cpu_seconds(pid)
            started = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(BATCHES_IN_FLIGHT)))
            elapsed = time.perf_counter() - started
            cpu = (cpu_seconds(pid) - cpu) / (BATCH * BATCHES)
    events = BATCH * BATCHES
    report(
        "CloudEvents batch ingest (1 ripple serve)",
        f"{events / elapsed:,.0f} events/s in batches of {BATCH}, {BATCHES_IN_FLIGHT} in flight "
        f"({cpu * 1e6:.0f} µs API CPU per event)",
    )


async def run() -> None:
    reading()
    await ingest()
