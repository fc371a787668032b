"""Running a step's body: async functions on the event loop, sync functions in a thread; the
per-step duration metric. No journal, no SQL.

A sync body runs in a worker thread so it cannot block the event loop. A thread cannot be
stopped from outside: a step canceled or released while its sync body runs leaves the
thread running until the function returns. `sync_bodies_running()` counts those threads, so
a stopping process can tell whether it must exit to stop them.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from ripple.platform.ops import metrics
from ripple.workflows.authoring.retry import seconds

__all__ = ["call_body", "observe_step", "sync_bodies_running"]

#: Labelled step histograms, cached (label lookups are hot: one per step).
_STEP_HISTOGRAMS: dict[tuple[str, str], Any] = {}
#: Sync step bodies running in threads right now, in this process.
_sync_running = 0
_sync_lock = threading.Lock()


def sync_bodies_running() -> int:
    """How many sync step bodies are running in threads in this process, including those of
    steps already canceled or released (their threads run on until the function returns)."""
    return _sync_running


def _call_in_thread(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    global _sync_running
    with _sync_lock:
        _sync_running += 1
    try:
        return fn(*args, **kwargs)
    finally:
        with _sync_lock:
            _sync_running -= 1


async def call_body(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timeout: timedelta | float | None,
) -> Any:
    """Run `fn(*args, **kwargs)`: awaited if it is async (or an object with an async
    `__call__`), else in a thread; bounded by `timeout` (TimeoutError past it)."""
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
    ):
        coro = fn(*args, **kwargs)
    else:
        coro = asyncio.to_thread(_call_in_thread, fn, args, kwargs)
    if timeout is not None:
        coro = asyncio.wait_for(coro, seconds(timeout))
    return await coro


def observe_step(workflow: str, key: str, elapsed: float) -> None:
    """Record one attempt's duration in the step-duration histogram."""
    label = (workflow, metrics.step_label(key))
    histogram = _STEP_HISTOGRAMS.get(label)
    if histogram is None:
        histogram = _STEP_HISTOGRAMS[label] = metrics.STEP_DURATION.labels(*label)
    histogram.observe(elapsed)
