"""Gauges computed from Postgres, and the worker-side `/metrics` endpoint."""

from __future__ import annotations

import uuid

import httpx
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool
from ripple.platform.ops.observability import (
    UNPINNED_VERSION,
    GaugeCollector,
    metrics_exposition,
    serve_metrics,
)
from ripple.workflows.store import RunUpkeep


def gauge(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


async def send(
    pool: Pool,
    queue: str,
    *,
    age: float = 0.0,
    visible_in: float | None = None,
    receive_count: int = 0,
    dead: bool = False,
) -> None:
    """A message created `age` seconds ago, visible since then unless `visible_in` says when."""
    if dead:
        await pool.execute(
            "INSERT INTO ripple_queue_dead_letters (id, queue, body, receive_count, created_at) "
            "VALUES (nextval(pg_get_serial_sequence('ripple_queue_messages', 'id')), $1, '{}', "
            "$3, now() - make_interval(secs => $2))",
            queue,
            age,
            receive_count,
        )
        return
    await pool.execute(
        "INSERT INTO ripple_queue_messages (queue, body, created_at, visible_at, receive_count) "
        "VALUES ($1, '{}', now() - make_interval(secs => $2), now() + make_interval(secs => $3), "
        "$4)",
        queue,
        age,
        -age if visible_in is None else visible_in,
        receive_count,
    )


async def test_gauges__queue_depth_and_oldest_visible_age(pool: Pool, settings: Settings) -> None:
    q = f"q{uuid.uuid4().hex[:8]}"
    idle = f"idle{uuid.uuid4().hex[:8]}"
    await send(pool, q, age=120)
    await send(pool, q, age=500, visible_in=30, receive_count=1)  # in flight: counts, not aged
    await send(pool, q, age=5)
    await send(pool, q, age=9000, dead=True)  # dead letters are not depth
    await pool.execute("INSERT INTO ripple_queues (name) VALUES ($1)", idle)
    collector = GaugeCollector(pool, settings, runs=RunUpkeep())

    await collector.refresh()

    assert gauge("queue_depth", queue=q) == 3
    age = gauge("queue_oldest_age_seconds", queue=q)
    assert age is not None
    assert 120 <= age < 400
    assert gauge("queue_depth", queue=idle) == 0
    assert gauge("queue_oldest_age_seconds", queue=idle) == 0

    await pool.execute("DELETE FROM ripple_queue_messages WHERE queue = $1", q)
    await collector.refresh()
    assert gauge("queue_depth", queue=q) is None  # gone, not left stale
    assert gauge("queue_depth", queue=idle) == 0


async def add_worker(pool: Pool, serves: list[dict[str, object]], *, age: float = 0.0) -> None:
    await pool.execute(
        "INSERT INTO ripple_workers (worker_id, hostname, pid, serves, heartbeat_at) "
        "VALUES ($1, 'h', 1, $2, now() - make_interval(secs => $3))",
        uuid.uuid4().hex,
        serves,
        age,
    )


async def add_run(pool: Pool, workflow: str, version: int | None, status: str) -> None:
    await pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, status) VALUES ($1, $2, $3, $4)",
        uuid.uuid4().hex,
        workflow,
        version,
        status,
    )


async def test_gauges__stranded_runs_by_workflow_version(pool: Pool, settings: Settings) -> None:
    served, old, dead, gone = (f"{n}-{uuid.uuid4().hex[:6]}" for n in ("srv", "old", "dead", "no"))
    await add_worker(pool, [{"workflow": served, "version": 2}, {"workflow": old, "version": 2}])
    # this worker's heartbeat is older than 3 leases: it does not count as live
    await add_worker(pool, [{"workflow": dead, "version": 1}], age=settings.lease_seconds * 4)
    await add_run(pool, served, 2, "running")
    await add_run(pool, served, None, "pending")  # unpinned: any version of the workflow serves
    await add_run(pool, old, 1, "sleeping")
    await add_run(pool, old, 1, "waiting")
    await add_run(pool, old, 1, "completed")  # terminal runs are never stranded
    await add_run(pool, dead, 1, "pending")
    await add_run(pool, gone, None, "pending")
    collector = GaugeCollector(pool, settings, runs=RunUpkeep())

    await collector.refresh()

    assert gauge("workflow_runs_stranded", workflow=served, version="2") is None
    assert gauge("workflow_runs_stranded", workflow=served, version=UNPINNED_VERSION) is None
    assert gauge("workflow_runs_stranded", workflow=old, version="1") == 2
    assert gauge("workflow_runs_stranded", workflow=dead, version="1") == 1
    assert gauge("workflow_runs_stranded", workflow=gone, version=UNPINNED_VERSION) == 1

    await add_worker(pool, [{"workflow": old, "version": 1}])
    await collector.refresh()
    assert gauge("workflow_runs_stranded", workflow=old, version="1") is None


async def test_gauges__webhook_endpoint_failing(pool: Pool, settings: Settings) -> None:
    failing, healthy, deleted = (str(uuid.uuid4()) for _ in range(3))
    for sub in (failing, healthy):
        await pool.execute(
            "INSERT INTO ripple_subscriptions (id, pattern, kind, target) "
            "VALUES ($1, '#', 'webhook', $2)",
            sub,
            {"type": "webhook", "url": "https://example.com/hook"},
        )
    await pool.execute(
        "INSERT INTO ripple_webhook_health (subscription_id, failing_since) VALUES "
        "($1, now()), ($2, NULL), ($3, now())",
        failing,
        healthy,
        deleted,
    )

    await GaugeCollector(pool, settings).refresh()

    assert gauge("webhook_endpoint_failing", subscription=failing) == 1
    assert gauge("webhook_endpoint_failing", subscription=healthy) == 0
    assert gauge("webhook_endpoint_failing", subscription=deleted) is None


async def test_serve_metrics__exposes_refreshed_gauges_over_http(
    pool: Pool, settings: Settings
) -> None:
    q = f"q{uuid.uuid4().hex[:8]}"
    await send(pool, q)
    await send(pool, q)
    server = await serve_metrics(0, collector=GaugeCollector(pool, settings))
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            response = await http.get("/metrics")
            missing = await http.get("/nothing")
    finally:
        server.close()
        await server.wait_closed()

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(response.text)}
    depth = {s.labels["queue"]: s.value for s in families["queue_depth"].samples}
    assert depth[q] == 2
    assert "sweeper_deleted" in families
    assert missing.status_code == 404


async def test_metrics_exposition__without_collector_is_the_registry() -> None:
    text = (await metrics_exposition()).decode()
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"workflow_runs_started", "events_published", "queue_depth"} <= names
