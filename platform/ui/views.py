"""Pure helpers for the dashboard's templates: the step timeline's geometry, formatting."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from ripple.workflows.runs.records import Run, StepRecord

__all__ = ["Bar", "Timeline", "ago", "duration", "pretty", "sparkline", "timeline", "ts", "until"]

#: Timeline geometry (SVG user units).
LABEL_WIDTH: Final = 200
PLOT_WIDTH: Final = 640
ROW_HEIGHT: Final = 22
#: Step kinds that wait rather than work: drawn hatched.
WAITING_KINDS: Final = frozenset({"sleep", "wait", "child", "signal", "event"})


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    status: str
    kind: str
    x: float
    width: float
    y: float
    title: str
    #: x of the next retry when the step is retrying (its backoff), else None.
    due_x: float | None


@dataclass(frozen=True, slots=True)
class Timeline:
    bars: list[Bar]
    width: int
    height: int
    label_width: int
    span_seconds: float


def _x(when: datetime, start: datetime, span: float) -> float:
    return LABEL_WIDTH + PLOT_WIDTH * max(0.0, (when - start).total_seconds()) / span


def timeline(run: Run, steps: Sequence[StepRecord], now: datetime | None = None) -> Timeline:
    """Gantt bars: each step from its start to its completion (or now / its due time)."""
    now = now or datetime.now(UTC)
    start = min([run.created_at, *(s.started_at for s in steps)])
    ends = [run.completed_at or now]
    for step in steps:
        ends.append(step.completed_at or max(now, step.due_at or now))
    span = max((max(ends) - start).total_seconds(), 0.001)
    bars: list[Bar] = []
    for row, step in enumerate(steps):
        end = step.completed_at or now
        x = _x(step.started_at, start, span)
        width = max(_x(end, start, span) - x, 2.0)
        seconds = (end - step.started_at).total_seconds()
        due_x = _x(step.due_at, start, span) if step.due_at and step.completed_at is None else None
        title = (
            f"{step.key} ({step.kind}) {step.status}, {step.attempts} attempt(s), {seconds:.3f} s"
        )
        bars.append(
            Bar(
                label=step.key if len(step.key) <= 28 else step.key[:27] + "…",
                status=str(step.status),
                kind=step.kind,
                x=round(x, 1),
                width=round(width, 1),
                y=row * ROW_HEIGHT,
                title=title,
                due_x=None if due_x is None else round(due_x, 1),
            )
        )
    return Timeline(
        bars=bars,
        width=LABEL_WIDTH + PLOT_WIDTH + 10,
        height=max(len(bars), 1) * ROW_HEIGHT + 4,
        label_width=LABEL_WIDTH,
        span_seconds=span,
    )


def pretty(value: Any) -> str:
    """JSON for display (the template escapes it)."""
    return json.dumps(value, indent=2, default=str, ensure_ascii=False)


def ts(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _span(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def duration(seconds: float) -> str:
    """'90 s', '60 min', '7 d': a length of time, rounded for reading."""
    return _span(seconds)


def ago(value: datetime | None, now: datetime | None = None) -> str:
    """'12 s ago' style age."""
    if value is None:
        return ""
    return _span(((now or datetime.now(UTC)) - value).total_seconds()) + " ago"


def until(value: datetime | None, now: datetime | None = None) -> str:
    """'in 12 s' (or 'due now' once it has passed)."""
    if value is None:
        return ""
    seconds = (value - (now or datetime.now(UTC))).total_seconds()
    return "due now" if seconds <= 0 else "in " + _span(seconds)


def sparkline(values: Sequence[int], width: int = 240, height: int = 36) -> str:
    """SVG polyline points for `values` scaled into width by height (0 at the bottom)."""
    if not values:
        return ""
    top = max(max(values), 1)
    step = width / max(len(values) - 1, 1)
    return " ".join(
        f"{i * step:.1f},{height - 2 - (height - 4) * v / top:.1f}" for i, v in enumerate(values)
    )
