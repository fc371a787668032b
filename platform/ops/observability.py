"""Gauges computed from Postgres, and a tiny `/metrics` endpoint for worker processes.

Counters and histograms are updated where things happen (publish, engine, dispatcher, sweeper).
The gauges here describe shared state instead (queue depth and age, runs no live worker serves,
failing webhook endpoints), so any process can compute them: `GaugeCollector` refreshes them
periodically (a `BackgroundService`) and on demand before a scrape. Every process computes the
same values; when Prometheus scrapes several, aggregate these gauges with `max`.

This module never changes a row. Run counts come from the workflow store through the
`RunStats` port (platform/ops/ports.py), which `Client` wires in.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool, map_errors
from ripple.platform.core.logs import get_logger
from ripple.platform.errors import RippleError
from ripple.platform.ops import metrics, observability_store
from ripple.platform.ops.ports import RunStats

if TYPE_CHECKING:
    from prometheus_client import Gauge

__all__ = ["UNPINNED_VERSION", "GaugeCollector", "metrics_exposition", "serve_metrics"]

log = get_logger("ripple.observability")

#: `version` label of stranded runs whose version no worker has pinned yet.
UNPINNED_VERSION = "unpinned"
#: A worker counts as live while its heartbeat is younger than this many leases.
LIVE_LEASES = 3.0
_REQUEST_TIMEOUT = 5.0


def _replace(gauge: Gauge, names: tuple[str, ...], values: Mapping[tuple[str, ...], float]) -> None:
    """Set `gauge` to exactly `values`: label sets that disappeared are removed, not left stale."""
    current: set[tuple[str, ...]] = set()
    for family in gauge.collect():
        for sample in family.samples:
            current.add(tuple(sample.labels[name] for name in names))
    for gone in current - values.keys():
        with contextlib.suppress(KeyError):
            gauge.remove(*gone)
    for labels, value in values.items():
        gauge.labels(*labels).set(value)


class GaugeCollector:
    """Refreshes the Postgres-computed gauges; run it as a background service or call `refresh()`.

    Args:
        pool: the database to read.
        settings: `metrics_interval` (period of `run()`) and `lease_seconds` (worker liveness).
        runs: the workflow store's statistics (stranded runs); None leaves that gauge alone.
    """

    name = "metrics"

    def __init__(self, pool: Pool, settings: Settings, *, runs: RunStats | None = None) -> None:
        self._pool = pool
        self._settings = settings
        self._runs = runs
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()
        self._refreshed_at = float("-inf")

    async def refresh(self) -> None:
        """Recompute every gauge now. A failing group is logged and keeps its previous values."""
        async with self._lock:
            await self._refresh_locked()

    async def refresh_if_stale(self, max_age: float = 0.0) -> None:
        """Refresh unless a refresh finished within `max_age` seconds before this call.

        With the default, only a refresh that finished while this call waited for the one in
        progress counts: concurrent scrapes share one round of queries, yet never read values
        computed before they asked.
        """
        asked = time.monotonic()
        async with self._lock:
            if self._refreshed_at >= asked - max_age:
                return
            await self._refresh_locked()

    async def _refresh_locked(self) -> None:
        await self._refresh_queues()
        await self._refresh_stranded()
        await self._refresh_webhooks()
        self._refreshed_at = time.monotonic()

    async def _refresh_queues(self) -> None:
        try:
            with map_errors():
                async with self._pool.acquire() as conn:
                    rows = await observability_store.select_queue_gauges(conn)
        except RippleError as exc:
            log.warning("gauges_refresh_failed", gauges="queues", error=exc.message)
            return
        _replace(metrics.QUEUE_DEPTH, ("queue",), {(r.queue,): r.depth for r in rows})
        _replace(metrics.QUEUE_OLDEST_AGE, ("queue",), {(r.queue,): r.oldest_age for r in rows})

    async def _refresh_stranded(self) -> None:
        if self._runs is None:
            return
        live = self._settings.lease_seconds * LIVE_LEASES
        try:
            with map_errors():
                async with self._pool.acquire() as conn:
                    rows = await self._runs.count_stranded_runs(conn, live_seconds=live)
        except RippleError as exc:
            log.warning("gauges_refresh_failed", gauges="stranded_runs", error=exc.message)
            return
        values: dict[tuple[str, ...], float] = {
            (r.workflow, UNPINNED_VERSION if r.version is None else str(r.version)): r.runs
            for r in rows
        }
        _replace(metrics.RUNS_STRANDED, ("workflow", "version"), values)

    async def _refresh_webhooks(self) -> None:
        try:
            with map_errors():
                async with self._pool.acquire() as conn:
                    rows = await observability_store.select_webhook_gauges(conn)
        except RippleError as exc:
            log.warning("gauges_refresh_failed", gauges="webhooks", error=exc.message)
            return
        values: dict[tuple[str, ...], float] = {
            (r.subscription_id,): 1.0 if r.failing else 0.0 for r in rows
        }
        _replace(metrics.WEBHOOK_ENDPOINT_FAILING, ("subscription",), values)

    async def run(self) -> None:
        """Refresh every `settings.metrics_interval` seconds until `stop()`."""
        while not self._stopping.is_set():
            await self.refresh()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._settings.metrics_interval)

    def stop(self) -> None:
        self._stopping.set()


async def metrics_exposition(collector: GaugeCollector | None = None) -> bytes:
    """The Prometheus text exposition of this process, gauges refreshed first when given one."""
    if collector is not None:
        await collector.refresh_if_stale()
    from prometheus_client import generate_latest

    metrics.define()
    return generate_latest()


async def _read_request_line(reader: asyncio.StreamReader) -> tuple[str, str]:
    line = await reader.readline()
    parts = line.decode("latin-1").split()
    while True:  # skip the headers: nothing in them matters here
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
    if len(parts) < 2:
        return "", ""
    return parts[0], parts[1].split("?", 1)[0]


async def serve_metrics(
    port: int, *, host: str = "127.0.0.1", collector: GaugeCollector | None = None
) -> asyncio.Server:
    """Serve `GET /metrics` on `host:port` from this event loop (for worker processes).

    With a `collector`, gauges are refreshed before each scrape (concurrent scrapes share one
    refresh). Port 0
    picks a free port (read it from `server.sockets[0].getsockname()`). Close the returned
    server with `server.close(); await server.wait_closed()`.
    """

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, path = await asyncio.wait_for(_read_request_line(reader), _REQUEST_TIMEOUT)
            if method == "GET" and path == "/metrics":
                from prometheus_client import CONTENT_TYPE_LATEST

                status, content_type = "200 OK", CONTENT_TYPE_LATEST
                body = await metrics_exposition(collector)
            else:
                status, content_type, body = "404 Not Found", "text/plain", b"not found\n"
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + body)
            await writer.drain()
        except (TimeoutError, ConnectionError) as exc:
            log.debug("metrics_request_dropped", error=str(exc))
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, host, port)
    log.info("metrics_serving", host=host, port=server.sockets[0].getsockname()[1])
    return server
