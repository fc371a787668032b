"""`CancelListener`: stops a worker's executions of runs canceled elsewhere.

`RunCanceled` hints (from any process, through the waker) make it look up which of the runs in
flight are now canceled in Postgres; those are reported so the worker cancels their tasks.
Without hints (no Redis), the heartbeat notices instead: a canceled run's lease is not extended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from ripple.platform.core.db import Pool, map_errors
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import CH_CANCELS, NullWaker
from ripple.platform.errors import RippleError
from ripple.workflows import store

__all__ = ["CancelListener"]

log = get_logger("ripple.workflows.worker")


class CancelListener:
    """Reports runs in flight that were canceled, on each cancel hint.

    Args:
        waker: delivers `RunCanceled` hints.
        pool: returns the pool to read with.
        running: returns the ids of the runs in flight now.
        on_canceled: called with the ids of those found canceled.
    """

    def __init__(
        self,
        *,
        waker: NullWaker,
        pool: Callable[[], Pool],
        running: Callable[[], Collection[str]],
        on_canceled: Callable[[set[str]], None],
    ) -> None:
        self._waker = waker
        self._pool = pool
        self._running = running
        self._on_canceled = on_canceled
        #: Set once hints are received (a cancel made before may go unnoticed by `run()`).
        self.listening = asyncio.Event()

    async def check(self) -> set[str]:
        """Look up which runs in flight are canceled; report and return them."""
        running = list(self._running())
        if not running:
            return set()
        with map_errors():
            canceled = await store.select_canceled(self._pool(), run_ids=running)
        if canceled:
            self._on_canceled(canceled)
        return canceled

    async def run(self) -> None:
        """Check on every cancel hint until canceled; a failed check is logged."""
        async with self._waker.listen(CH_CANCELS) as listener:
            self.listening.set()
            try:
                while True:
                    if not await listener.wait(None):
                        continue
                    try:
                        await self.check()
                    except RippleError as exc:
                        log.warning("worker_cancel_check_failed", error=str(exc))
            finally:
                self.listening.clear()
