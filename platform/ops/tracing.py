"""OpenTelemetry spans when the `otel` extra is installed; otherwise every call is a no-op.

Trace context travels as a W3C `traceparent` dict stored with events and runs, so a run's spans
join its publisher's trace across processes and resumes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["current_context", "recording", "refresh", "span"]

#: The tracer once `_load()` ran: None before, and without the extra.
_tracer: Any = None
_loaded = False


def _load() -> Any:
    """The tracer; opentelemetry is imported on first use, so a process that never traces (a CLI
    command that only reads) does not pay for its import."""
    global _tracer, _loaded
    if not _loaded:
        _loaded = True
        try:  # the extra is optional
            from opentelemetry import trace
        except ImportError:  # pragma: no cover - exercised only without the extra
            return None
        _tracer = trace.get_tracer("ripple")
    return _tracer


@contextlib.contextmanager
def span(name: str, parent: dict[str, str] | None = None, **attributes: Any) -> Iterator[Any]:
    """A span named `name`, child of `parent` (a stored trace context) or of the current span.

    When the current span already belongs to `parent`'s trace (a step inside its run's span),
    the span nests under the current span instead, so the trace keeps its shape.
    """
    tracer = _tracer if _loaded else _load()
    if tracer is None:
        yield None
        return
    from opentelemetry import context as otel_context
    from opentelemetry import propagate

    token = None
    if parent and not _inside(parent):
        token = otel_context.attach(propagate.extract(parent))
    try:
        clean = {k: v for k, v in attributes.items() if v is not None}
        with tracer.start_as_current_span(name, attributes=clean) as current:
            yield current
    finally:
        if token is not None:
            otel_context.detach(token)


def _inside(parent: dict[str, str]) -> bool:
    """True when the current span is valid and in the same trace as the stored `parent`."""
    from opentelemetry import propagate, trace

    current = trace.get_current_span().get_span_context()
    if not current.is_valid:
        return False
    stored = trace.get_current_span(propagate.extract(parent)).get_span_context()
    return bool(stored.is_valid and stored.trace_id == current.trace_id)


#: Once an SDK provider is installed it stays (OpenTelemetry allows setting it once); until then
#: the check (which reads environment variables) runs at most once per second.
_RECHECK_SECONDS = 1.0
_recording = False
_checked_at = float("-inf")


def recording() -> bool:
    """True when spans are recorded (an SDK tracer provider is installed); hot paths skip
    `span()` and context propagation otherwise."""
    global _recording, _checked_at
    if _recording or (_loaded and _tracer is None):
        return _recording
    now = time.monotonic()
    if now - _checked_at < _RECHECK_SECONDS:
        return False
    _checked_at = now
    if _load() is None:
        return False
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    _recording = not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)
    return _recording


def refresh() -> None:
    """Look for a tracer provider again on the next call (after installing one mid-process;
    otherwise it is noticed within a second)."""
    global _checked_at
    _checked_at = float("-inf")


def current_context() -> dict[str, str] | None:
    """The current trace context as a storable dict, or None when not tracing."""
    if not recording():
        return None
    from opentelemetry import propagate

    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier or None
