"""A scripted scenario, then `GET /metrics` parsed with prometheus_client's parser.

The registry is process-global (other tests count too), so counters are checked as deltas
between a scrape before and one after; gauges computed from Postgres are checked as values.
"""

from __future__ import annotations

from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from ripple.platform.api.app import create_app
from ripple.platform.client import Client
from ripple.subscribers import QueueTarget
from ripple.workflows import (
    NonRetriableError,
    RetryPolicy,
    Worker,
    WorkflowContext,
    workflow,
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(client: Client) -> Samples:
    transport = httpx.ASGITransport(app=create_app(client))
    async with httpx.AsyncClient(transport=transport, base_url="http://ripple") as http:
        response = await http.get("/metrics")
    assert response.status_code == 200
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def send(n: int) -> int:
    return n


attempts: dict[str, int] = {}


def flaky(key: str) -> str:
    attempts[key] = attempts.get(key, 0) + 1
    if attempts[key] == 1:
        raise RuntimeError("first attempt fails")
    return key


@workflow(name="metrics-ok")
async def metrics_ok(ctx: WorkflowContext, inp: dict[str, Any]) -> int:
    total = 0
    for i in range(2):  # auto-indexed keys `send`, `send:1` share one step label
        total += await ctx.step.run("send", send, i)
    await ctx.step.run(
        "flaky", flaky, ctx.run_id, retry=RetryPolicy(initial_interval=0.01, jitter=0)
    )
    return total


def refuse() -> None:
    raise NonRetriableError("refused")


@workflow(name="metrics-fail")
async def metrics_fail(ctx: WorkflowContext, inp: dict[str, Any]) -> None:
    await ctx.step.run("refuse", refuse)


@workflow(name="metrics-wait")
async def metrics_wait(ctx: WorkflowContext, inp: dict[str, Any]) -> Any:
    return await ctx.step.wait_for_event("approve")


async def drain(client: Client, worker: Worker, run_ids: list[str]) -> None:
    """Execute until every run is terminal (parked retries may need more than one pass)."""
    for _ in range(100):
        await worker.run_until_idle()
        runs = [await client.get_run(run_id) for run_id in run_ids]
        if all(r is not None and r.status in {"completed", "failed"} for r in runs):
            return
    raise AssertionError("runs did not finish")


async def test_metrics__scripted_scenario_counts(client: Client) -> None:
    attempts.clear()
    before = await scrape(client)

    await client.subscribe("shop.#", QueueTarget("metrics-q"))
    for n in range(4):
        await client.publish("shop.order.created", {"n": n})
    await client.publish("audit.login", {"n": 0})
    received = await client.queues.receive("metrics-q", max_messages=1, visibility_timeout=60)
    assert len(received) == 1  # one in flight, three waiting: all four are depth
    ok = [(await client.start(metrics_ok, {})).run_id for _ in range(3)]
    failed = [(await client.start(metrics_fail, {})).run_id for _ in range(2)]
    waiting = await client.start(metrics_wait, {})
    orphan = await client.start("metrics-orphan", {})  # no worker serves it
    worker = Worker(client, [metrics_ok, metrics_fail, metrics_wait], webhooks=False, sweeper=False)
    await drain(client, worker, ok + failed)
    await client.signal(waiting.run_id, "approve", {"by": "ann"})
    await drain(client, worker, [waiting.run_id])

    after = await scrape(client)

    runs_started = "workflow_runs_started_total"
    assert delta(before, after, runs_started, workflow="metrics-ok") == 3
    assert delta(before, after, runs_started, workflow="metrics-fail") == 2
    assert delta(before, after, runs_started, workflow="metrics-orphan") == 1
    completed = "workflow_runs_completed_total"
    assert delta(before, after, completed, workflow="metrics-ok", status="completed") == 3
    assert delta(before, after, completed, workflow="metrics-fail", status="failed") == 2
    assert delta(before, after, completed, workflow="metrics-wait", status="completed") == 1
    assert delta(before, after, completed, workflow="metrics-ok", status="failed") == 0
    assert delta(before, after, "workflow_run_duration_seconds_count", workflow="metrics-ok") == 3
    step_count = "workflow_step_duration_seconds_count"
    assert delta(before, after, step_count, workflow="metrics-ok", step="send") == 6
    assert delta(before, after, step_count, workflow="metrics-ok", step="flaky") == 6
    assert not any(
        name == step_count and dict(labels).get("step") == "send:1" for name, labels in after
    )
    assert delta(before, after, "workflow_step_retries_total", workflow="metrics-ok") == 3
    assert value(after, "workflow_runs_in_flight", workflow="metrics-ok") == 0
    assert delta(before, after, "workflow_signals_total", outcome="delivered") == 1
    assert delta(before, after, "events_published_total", topic_prefix="shop") == 4
    assert delta(before, after, "events_published_total", topic_prefix="audit") == 1
    assert delta(before, after, "deliveries_total", kind="queue", outcome="created") == 4
    assert value(after, "queue_depth", queue="metrics-q") == 4
    assert value(after, "queue_oldest_age_seconds", queue="metrics-q") >= 0
    stranded = "workflow_runs_stranded"
    assert value(after, stranded, workflow="metrics-orphan", version="unpinned") == 1
    assert value(after, stranded, workflow="metrics-ok", version="1") == 0
    assert (await client.get_run(orphan.run_id)).status == "pending"  # type: ignore[union-attr]

    # retention: age the finished runs past the default retention and sweep
    await client.pool.execute(
        "UPDATE ripple_runs SET completed_at = now() - interval '31 days' "
        "WHERE status IN ('completed', 'failed')"
    )
    sweeper = client.background_services(webhooks=False, sweeper=True)[0]
    await sweeper.sweep_once()  # type: ignore[attr-defined]
    swept = await scrape(client)
    assert delta(after, swept, "sweeper_deleted_total", kind="runs") == 6
    assert delta(after, swept, "sweeper_deleted_total", kind="steps") == 3 * 3 + 2 + 1
