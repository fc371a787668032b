from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.unit.observability.otel import span_exporter


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The in-memory span exporter, emptied for this test."""
    exporter = span_exporter()
    exporter.clear()
    yield exporter
    exporter.clear()
