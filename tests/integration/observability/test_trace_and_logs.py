"""One trace from publish through runs and steps; log lines bound to runs and deliveries."""

from __future__ import annotations

import traceback
from typing import Any

import httpx
import pytest
import structlog
from opentelemetry import _logs, metrics
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from structlog.testing import capture_logs

from ripple.platform.api.app import create_app
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.subscribers import WebhookTarget, WorkflowTarget
from ripple.workflows import RetryPolicy, Worker, WorkflowContext, workflow
from tests.integration.subscribers.webhook_sink import Sink

log = structlog.get_logger("tests.observability")


def add_one(n: int) -> int:
    log.info("adding", n=n)
    return n + 1


@workflow(name="traced-order")
async def traced_order(ctx: WorkflowContext, inp: dict[str, Any]) -> int:
    first = await ctx.step.run("first", add_one, int(inp["n"]))
    await ctx.step.wait_for_event("go", match={"ok": True})  # suspends: a second execution pass
    return await ctx.step.run("second", add_one, first)


async def drive(client: Client, worker: Worker, run_id: str, status: str) -> None:
    """Execute until the run reaches `status` (a parked retry may need more than one pass)."""
    for _ in range(50):
        await worker.run_until_idle()
        run = await client.get_run(run_id)
        assert run is not None
        if run.status == status:
            return
    raise AssertionError(f"run {run_id} did not reach {status}")


def by_name(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]


async def test_tracing__publish_workflow_run_and_steps_form_one_trace(
    client: Client, spans: InMemorySpanExporter
) -> None:
    await client.subscribe("order.*", WorkflowTarget(traced_order))
    published = await client.publish("order.placed", {"n": 1})
    run_id = str(await client.pool.fetchval("SELECT run_id FROM ripple_runs"))
    worker = Worker(client, [traced_order], webhooks=False, sweeper=False)

    await drive(client, worker, run_id, "waiting")
    await client.signal(run_id, "go", {"ok": True})
    await drive(client, worker, run_id, "completed")

    (publish,) = by_name(spans, "event.publish")
    assert publish.attributes is not None
    assert publish.attributes["event_id"] == published.event_id
    trace_id = publish.context.trace_id
    runs = by_name(spans, "workflow.run")
    assert len(runs) == 2  # one per execution pass: before and after the wait
    for run in runs:
        assert run.context.trace_id == trace_id
        assert run.parent is not None
        assert run.parent.span_id == publish.context.span_id
    steps = by_name(spans, "workflow.step")
    assert sorted(str((s.attributes or {}).get("step")) for s in steps) == ["first", "second"]
    run_span_ids = {r.context.span_id for r in runs}
    for step in steps:
        assert step.context.trace_id == trace_id
        assert step.parent is not None
        assert step.parent.span_id in run_span_ids  # nested under its pass's workflow.run


async def test_tracing__a_rest_publish_continues_the_callers_trace(
    client: Client, spans: InMemorySpanExporter
) -> None:
    # FastAPI's HTTP request span (its built-in OpenTelemetry, kept on for tracing) takes the
    # caller's W3C traceparent; the publish is traced under it.
    caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(client)), base_url="http://t"
    )
    async with http:
        response = await http.post(
            "/v1/topics/order.placed/events",
            json={"payload": {"n": 1}},
            headers={"traceparent": f"00-{caller_trace}-00f067aa0ba902b7-01"},
        )
    assert response.status_code == 202, response.text
    (publish,) = by_name(spans, "event.publish")
    assert format(publish.context.trace_id, "032x") == caller_trace
    assert publish.parent is not None
    (server,) = [
        s for s in spans.get_finished_spans() if s.context.span_id == publish.parent.span_id
    ]
    assert server.kind.name == "SERVER"
    assert server.parent is not None
    assert format(server.parent.span_id, "016x") == "00f067aa0ba902b7"


async def test_api__fastapi_looks_up_no_metric_or_log_provider_per_request(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # FastAPI's OpenTelemetry metrics and logs are off: with them on, every request looked up
    # the global meter and logger providers (environment variables included). The app's first
    # request is not counted: where another test installed the tracing SDK globally, FastAPI
    # makes its tracer then, once per app, and the SDK's tracer looks up the meter provider.
    http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(client)), base_url="http://t"
    )
    lookups: list[str] = []
    async with http:
        first = await http.post("/v1/topics/order.placed/events", json={"payload": {"n": 0}})
        assert first.status_code == 202, first.text
        for module, name in ((metrics, "get_meter_provider"), (_logs, "get_logger_provider")):
            original = getattr(module, name)

            def counted(*args: Any, _name: str = name, _original: Any = original) -> Any:
                lookups.append(f"{_name} from {''.join(traceback.format_stack(limit=16))}")
                return _original(*args)

            monkeypatch.setattr(module, name, counted)
        response = await http.post("/v1/topics/order.placed/events", json={"payload": {"n": 1}})
    assert response.status_code == 202, response.text
    assert lookups == [], "\n\n".join(lookups)


async def test_tracing__webhook_delivery_joins_the_publishers_trace(
    settings: Settings, spans: InMemorySpanExporter
) -> None:
    loopback = settings.model_copy(update={"webhook_allowed_networks": ["127.0.0.0/8"]})
    async with Client(settings=loopback) as client, Sink() as sink:
        await client.subscribe("order.*", WebhookTarget(sink.url()))
        await client.publish("order.placed", {"n": 1})
        dispatcher = client.background_services(webhooks=True, sweeper=False)[0]
        await dispatcher.run_until_idle()  # type: ignore[attr-defined]

    assert len(sink.received) == 1
    (publish,) = by_name(spans, "event.publish")
    (deliver,) = by_name(spans, "webhook.deliver")
    assert deliver.context.trace_id == publish.context.trace_id
    assert deliver.parent is not None
    assert deliver.parent.span_id == publish.context.span_id


flaky_calls = 0


def flaky(n: int) -> int:
    global flaky_calls
    flaky_calls += 1
    log.info("flaky_called", n=n)
    if flaky_calls == 1:
        raise RuntimeError("first attempt fails")
    return n


@workflow(name="logged-run")
async def logged_run(ctx: WorkflowContext, inp: dict[str, Any]) -> int:
    first = await ctx.step.run("add", add_one, int(inp["n"]))
    return await ctx.step.run(
        "flaky", flaky, first, retry=RetryPolicy(max_attempts=3, initial_interval=0.01, jitter=0)
    )


def merged() -> Any:
    """Capture logs the way production renders them: with the bound context merged in."""
    return capture_logs(processors=[structlog.contextvars.merge_contextvars])


async def test_logs__lines_inside_a_run_carry_run_workflow_and_step(client: Client) -> None:
    global flaky_calls
    flaky_calls = 0
    handle = await client.start(logged_run, {"n": 1})
    worker = Worker(client, [logged_run], webhooks=False, sweeper=False)

    with merged() as entries:
        await drive(client, worker, handle.run_id, "completed")

    inside = [e for e in entries if e["event"] in {"adding", "flaky_called"}]
    assert [e["event"] for e in inside] == ["adding", "flaky_called", "flaky_called"]
    for entry in inside:
        assert entry["run_id"] == handle.run_id
        assert entry["workflow"] == "logged-run"
    assert [e["step"] for e in inside] == ["add", "flaky", "flaky"]
    retries = [e for e in entries if e["event"] == "step_retry_scheduled"]
    assert len(retries) == 1
    assert (retries[0]["run_id"], retries[0]["workflow"], retries[0]["step"]) == (
        handle.run_id,
        "logged-run",
        "flaky",
    )
    # nothing logged with a run id lacks the workflow, and no run's context leaks outside it
    for entry in entries:
        if "run_id" in entry:
            assert entry.get("workflow") == "logged-run", entry
    assert structlog.contextvars.get_contextvars() == {}


async def test_logs__lines_inside_a_delivery_carry_event_and_subscription(
    settings: Settings,
) -> None:
    loopback = settings.model_copy(update={"webhook_allowed_networks": ["127.0.0.0/8"]})
    async with Client(settings=loopback) as client, Sink() as sink:
        sub = await client.subscribe("order.*", WebhookTarget(sink.url()))
        published = await client.publish("order.placed", {"n": 1})
        dispatcher = client.background_services(webhooks=True, sweeper=False)[0]
        with merged() as entries:
            await dispatcher.run_until_idle()  # type: ignore[attr-defined]

    delivered = [e for e in entries if e["event"] == "webhook_delivered"]
    assert len(delivered) == 1
    for entry in entries:
        if "delivery_id" in entry:
            assert entry["event_id"] == published.event_id
            assert entry["subscription_id"] == sub.id
    assert delivered[0]["event_id"] == published.event_id
