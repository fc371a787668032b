"""Prometheus metrics of every Ripple process, defined once (prometheus-client default registry).

Label values are bounded: workflow names, step base names (auto-indexed keys `name:3` collapse to
`name`), topic prefixes (first segment), queue names and statuses.

The metrics are created (and prometheus-client imported) when one of them is first used: a
process that records none, such as a one-shot `ripple` command, never imports it. `/metrics`
calls `define()` first, so a scrape lists every metric either way.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from prometheus_client import Counter, Gauge, Histogram

__all__ = [
    "API_REQUESTS",
    "DELIVERIES",
    "EVENTS_PUBLISHED",
    "LEASE_EXPIRATIONS",
    "QUEUE_DEPTH",
    "QUEUE_OLDEST_AGE",
    "RUNS_COMPLETED",
    "RUNS_IN_FLIGHT",
    "RUNS_STARTED",
    "RUNS_STRANDED",
    "RUN_DURATION",
    "SIGNALS",
    "STEP_DURATION",
    "STEP_RETRIES",
    "SWEEPER_DELETED",
    "WEBHOOK_ENDPOINT_FAILING",
    "define",
    "step_label",
    "topic_prefix",
]

_DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    300,
    3600,
)

if TYPE_CHECKING:
    RUNS_STARTED: Counter
    RUNS_COMPLETED: Counter
    RUNS_IN_FLIGHT: Gauge
    RUN_DURATION: Histogram
    STEP_DURATION: Histogram
    STEP_RETRIES: Counter
    SIGNALS: Counter
    EVENTS_PUBLISHED: Counter
    DELIVERIES: Counter
    QUEUE_DEPTH: Gauge
    QUEUE_OLDEST_AGE: Gauge
    WEBHOOK_ENDPOINT_FAILING: Gauge
    LEASE_EXPIRATIONS: Counter
    SWEEPER_DELETED: Counter
    RUNS_STRANDED: Gauge
    API_REQUESTS: Counter

#: The metrics: the upper-case names of `__all__`, created together by `define()`.
_NAMES: Final = frozenset(name for name in __all__ if name.isupper())
_defining = threading.Lock()


def define() -> None:
    """Create every metric in the default registry, once (safe from any thread)."""
    with _defining:
        if "RUNS_STARTED" not in globals():
            globals().update(_create())


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    define()
    return globals()[name]


def _create() -> dict[str, Any]:
    from prometheus_client import Counter, Gauge, Histogram

    return {
        "RUNS_STARTED": Counter("workflow_runs_started", "Workflow runs created.", ["workflow"]),
        "RUNS_COMPLETED": Counter(
            "workflow_runs_completed",
            "Workflow runs that reached a terminal state.",
            ["workflow", "status"],
        ),
        "RUNS_IN_FLIGHT": Gauge(
            "workflow_runs_in_flight", "Runs executing in this process now.", ["workflow"]
        ),
        "RUN_DURATION": Histogram(
            "workflow_run_duration_seconds",
            "Creation to terminal state.",
            ["workflow"],
            buckets=_DURATION_BUCKETS,
        ),
        "STEP_DURATION": Histogram(
            "workflow_step_duration_seconds",
            "One step attempt's execution time.",
            ["workflow", "step"],
            buckets=_DURATION_BUCKETS,
        ),
        "STEP_RETRIES": Counter(
            "workflow_step_retries",
            "Step attempts that failed and were scheduled again.",
            ["workflow"],
        ),
        "SIGNALS": Counter("workflow_signals", "Signals accepted.", ["outcome"]),
        "EVENTS_PUBLISHED": Counter(
            "events_published", "Events published (first topic segment).", ["topic_prefix"]
        ),
        "DELIVERIES": Counter(
            "deliveries", "Deliveries to subscription targets by outcome.", ["kind", "outcome"]
        ),
        "QUEUE_DEPTH": Gauge("queue_depth", "Messages waiting or in flight.", ["queue"]),
        "QUEUE_OLDEST_AGE": Gauge(
            "queue_oldest_age_seconds", "Age of the oldest visible message.", ["queue"]
        ),
        "WEBHOOK_ENDPOINT_FAILING": Gauge(
            "webhook_endpoint_failing",
            "1 while a webhook subscription keeps failing.",
            ["subscription"],
        ),
        "LEASE_EXPIRATIONS": Counter(
            "lease_expirations",
            "Runs reclaimed after their lease expired (a worker died or stalled).",
        ),
        "SWEEPER_DELETED": Counter("sweeper_deleted", "Rows deleted by retention.", ["kind"]),
        "RUNS_STRANDED": Gauge(
            "workflow_runs_stranded",
            "Active runs pinned to a (workflow, version) no live worker serves.",
            ["workflow", "version"],
        ),
        "API_REQUESTS": Counter(
            "ripple_api_requests",
            "Authorised API requests by token name (`env` for RIPPLE_API_TOKENS, `local` "
            "without auth).",
            ["token"],
        ),
    }


def step_label(step_key: str) -> str:
    """Bounded label for a step key: `send:3` becomes `send`."""
    base, sep, suffix = step_key.rpartition(":")
    return base if sep and suffix.isdigit() else step_key


def topic_prefix(topic: str) -> str:
    """Bounded label for a topic: its first segment."""
    return topic.split(".", 1)[0]
