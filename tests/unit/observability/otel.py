"""A process-wide OpenTelemetry SDK provider with an in-memory exporter, for span assertions.

OpenTelemetry allows one global TracerProvider per process, so every test shares this one and
clears the exporter first (the `spans` fixtures do).
"""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ripple.platform.ops import tracing

_exporter: InMemorySpanExporter | None = None


def span_exporter() -> InMemorySpanExporter:
    """The exporter receiving every span this process ends (installed on first use)."""
    global _exporter
    if _exporter is None:
        _exporter = InMemorySpanExporter()
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        tracing.refresh()
    return _exporter
