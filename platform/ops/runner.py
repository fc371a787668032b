"""`ProcessRunner`: the one place a process composes its long-running services.

It starts the services side by side (a workflow worker's executor, the webhook dispatcher, the
sweeper, the scheduler, the API server), and stops them all, each through its own graceful
`stop()`, when the process gets SIGTERM or SIGINT, when `stop()` is called, or when any one of
them returns or fails. A failure is logged with the service's name and re-raised once every
service has stopped, so the process exits non-zero. Only a process's entry point (the CLI)
asks the runner to `gc.freeze()` once startup is done; library code never does.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import threading
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

from ripple.platform.core.logs import get_logger
from ripple.platform.ops.services import BackgroundService

__all__ = ["ProcessRunner", "StartsUp", "freeze_startup_objects", "run_process"]

log = get_logger("ripple.process")

_frozen = False

#: The young generation's collection threshold once startup is done (CPython's default: 700;
#: 3.13 raised it to 2,000). CPython counts allocations minus deallocations of tracked objects
#: since the last collection, never below zero, so a burst (a claim of 100 deliveries, 50
#: requests started at once) triggers collections that free almost nothing; `python -m bench
#: --only webhooks` prints the worker's collection count.
GC_YOUNG_THRESHOLD: Final = 5_000

T = TypeVar("T")


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (not on Windows), else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_process(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on uvloop when it is installed: a process entry point's event loop
    (`ripple serve`, `ripple worker`, `ripple dev`). uvloop's transports, timers and callbacks
    are C: less CPU per request and per hop than asyncio's selector loop (`python -m
    bench.rest_variants` compares the two)."""
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        return runner.run(main)


def freeze_startup_objects() -> None:
    """Take what exists once a process has started (modules, definitions, pools: they live as
    long as the process) out of the cyclic collector's view, once per process. A full
    collection otherwise walks all of them and stalls the event loop, the tail of sleep
    lateness in `make bench`; after this it walks only what runs allocate. The young
    generation's threshold is raised to GC_YOUNG_THRESHOLD at the same time."""
    global _frozen
    if not _frozen:
        _frozen = True
        gc.collect()  # garbage frozen now would never be reclaimed
        gc.freeze()
        _young, *older = gc.get_threshold()
        gc.set_threshold(GC_YOUNG_THRESHOLD, *older)
        log.info("gc_frozen", objects=gc.get_freeze_count(), young_threshold=gc.get_threshold()[0])


@runtime_checkable
class StartsUp(Protocol):
    """A service with a startup phase: `started()` returns once it is ready for work."""

    async def started(self) -> None: ...


class ProcessRunner:
    """Runs services side by side until a signal, `stop()`, or one of them ends.

    Args:
        services: each runs in its own task; names appear in logs and task names.
        name: what runs them, in log events (a signal is logged as `<name>_signal`).
        handle_signals: SIGTERM and SIGINT stop every service (only in the main thread; pass
            False when the application handles signals itself).
        freeze: call `gc.freeze()` once every service is started (for process entry points).
        on_started: called once every service is started (e.g. to print a banner).
    """

    def __init__(
        self,
        services: Sequence[BackgroundService],
        *,
        name: str = "process",
        handle_signals: bool = True,
        freeze: bool = False,
        on_started: Callable[[], None] | None = None,
    ) -> None:
        self.services = list(services)
        self.name = name
        self.handle_signals = handle_signals
        self._freeze = freeze
        self._on_started = on_started
        self._stop = asyncio.Event()
        self._stopping = False

    def stop(self) -> None:
        """Ask every service to stop (also before `run()`: it then stops them at once)."""
        self._stop.set()
        if not self._stopping:
            self._stopping = True
            for service in self.services:
                service.stop()

    async def run(self) -> None:
        """Run every service until one ends or a stop is requested, then stop them all.

        Returns once all have returned; re-raises the first failure (with a note naming the
        service), after the others stopped gracefully.
        """
        with self._signals_handled():
            await self._run()

    async def _run(self) -> None:
        tasks = {
            asyncio.create_task(service.run(), name=f"ripple-{service.name}"): service
            for service in self.services
        }
        startup = asyncio.create_task(self._startup(), name="ripple-startup")
        startup.add_done_callback(self._startup_done)
        stop_requested = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait([stop_requested, *tasks], return_when=asyncio.FIRST_COMPLETED)
        finally:
            startup.cancel()
            stop_requested.cancel()
            if not self._stopping:
                first = next((t for t in tasks if t.done()), None)
                if first is not None:
                    self._ended_early(tasks[first], first)
            self.stop()
            await asyncio.gather(*tasks, startup, stop_requested, return_exceptions=True)
        for task, service in tasks.items():
            log.info("service_stopped", service=service.name, outcome=_outcome(task))
        log.info("process_stopped", process=self.name, services=[s.name for s in self.services])
        for task, service in tasks.items():
            if task.cancelled():
                continue
            exc = task.exception()
            if exc is not None:
                exc.add_note(f"raised by the {service.name} service; the others were stopped")
                raise exc
        failure = None if startup.cancelled() else startup.exception()
        if failure is not None:
            raise failure

    def _ended_early(self, service: BackgroundService, task: asyncio.Task[None]) -> None:
        """A service returned or failed on its own: say which, before stopping the rest."""
        if task.cancelled():
            log.error("service_canceled", service=service.name)
            return
        exc = task.exception()
        if exc is None:
            log.info("service_exited", service=service.name)
        else:
            log.error(
                "service_failed",
                service=service.name,
                error=f"{type(exc).__name__}: {exc}",
                exc_info=exc,
            )

    def _startup_done(self, task: asyncio.Task[None]) -> None:
        """A failed startup step (`started()` or `on_started`) stops every service."""
        if not task.cancelled() and task.exception() is not None:
            log.error("process_startup_failed", error=repr(task.exception()))
            self.stop()

    async def _startup(self) -> None:
        await asyncio.gather(*(s.started() for s in self.services if isinstance(s, StartsUp)))
        if self._freeze:
            freeze_startup_objects()
        log.info("process_started", process=self.name, services=[s.name for s in self.services])
        if self._on_started is not None:
            self._on_started()

    @contextlib.contextmanager
    def _signals_handled(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        handled: list[signal.Signals] = []
        if self.handle_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    handled.append(sig)
        try:
            yield
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info(f"{self.name}_signal", signal=sig.name)
        self.stop()


def _outcome(task: asyncio.Task[None]) -> str:
    if task.cancelled():
        return "canceled"
    return "returned" if task.exception() is None else "failed"
