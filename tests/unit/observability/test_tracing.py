"""The tracing shim: spans, storable contexts, and joining a stored context later."""

from __future__ import annotations

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ripple.platform.ops import tracing


def test_tracing__no_context_outside_a_span(spans: InMemorySpanExporter) -> None:
    assert tracing.current_context() is None


def test_tracing__stored_context_joins_the_trace_later(spans: InMemorySpanExporter) -> None:
    with tracing.span("event.publish", topic="user.signup", skipped=None):
        stored = tracing.current_context()
    assert stored is not None
    assert set(stored) == {"traceparent"}

    # later, in another process or resume: nothing is current, the stored context is the parent
    with tracing.span("workflow.run", parent=stored, run_id="r1"), tracing.span("workflow.step"):
        pass

    finished = {s.name: s for s in spans.get_finished_spans()}
    publish, run, step = (finished[n] for n in ("event.publish", "workflow.run", "workflow.step"))
    assert publish.attributes == {"topic": "user.signup"}
    assert run.context.trace_id == publish.context.trace_id
    assert step.context.trace_id == publish.context.trace_id
    assert run.parent is not None
    assert run.parent.span_id == publish.context.span_id
    assert step.parent is not None
    assert step.parent.span_id == run.context.span_id
    assert tracing.current_context() is None  # the stored parent was detached again


def test_tracing__inside_the_stored_trace_spans_nest_under_the_current_span(
    spans: InMemorySpanExporter,
) -> None:
    with tracing.span("event.publish"):
        stored = tracing.current_context()
    assert stored is not None
    with tracing.span("workflow.run", parent=stored), tracing.span("workflow.step", parent=stored):
        pass

    finished = {s.name: s for s in spans.get_finished_spans()}
    run, step = finished["workflow.run"], finished["workflow.step"]
    assert step.parent is not None
    assert step.parent.span_id == run.context.span_id


def test_tracing__a_stored_parent_wins_over_an_unrelated_current_span(
    spans: InMemorySpanExporter,
) -> None:
    with tracing.span("event.publish"):
        stored = tracing.current_context()
    assert stored is not None
    with tracing.span("worker.loop"), tracing.span("workflow.run", parent=stored):
        pass

    finished = {s.name: s for s in spans.get_finished_spans()}
    run, publish = finished["workflow.run"], finished["event.publish"]
    assert run.context.trace_id == publish.context.trace_id
    assert run.parent is not None
    assert run.parent.span_id == publish.context.span_id
