"""`LeaseHeartbeat`: keeps a worker's claims alive while their runs execute.

Every third of the lease it marks the worker alive and extends the lease of each run in
flight, fenced by the epoch of its claim. A run whose lease could not be extended (it expired
and another worker may have claimed it, or it was canceled or finished elsewhere) is reported
as lost, and the worker stops executing it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, Protocol, TypeVar

from ripple.platform.core.db import Pool, map_errors
from ripple.platform.core.logs import get_logger
from ripple.platform.errors import RippleError
from ripple.workflows import store

__all__ = ["HeldRun", "LeaseHeartbeat"]

log = get_logger("ripple.workflows.worker")


class HeldRun(Protocol):
    """A claim being executed: the run and the epoch its lease is fenced by."""

    @property
    def run_id(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    def renew(self, sent: float) -> None:
        """The lease was extended by a statement sent at loop time `sent`."""
        ...


H = TypeVar("H", bound=HeldRun)


class LeaseHeartbeat(Generic[H]):
    """Extends the leases of a worker's runs in flight; reports the ones it lost.

    Args:
        pool: returns the pool to write with (a worker's own pool opens only when it runs).
        worker_id: the `ripple_workers` row whose heartbeat is kept fresh.
        lease: seconds a lease lasts; it is extended every `lease / 3`.
        held: returns the claims in flight now.
        on_lost: called with the claims whose lease could not be extended.
    """

    def __init__(
        self,
        *,
        pool: Callable[[], Pool],
        worker_id: str,
        lease: float,
        held: Callable[[], Sequence[H]],
        on_lost: Callable[[Sequence[H]], None],
    ) -> None:
        self._pool = pool
        self.worker_id = worker_id
        self.lease = lease
        self.interval = max(0.05, lease / 3)
        self._held = held
        self._on_lost = on_lost

    async def beat(self) -> list[H]:
        """One round: returns (and reports) the claims whose lease was lost."""
        slots = list(self._held())
        with map_errors():
            async with self._pool().acquire() as conn:
                await store.heartbeat_worker(conn, worker_id=self.worker_id)
                if not slots:
                    return []
                sent = asyncio.get_running_loop().time()
                kept = await store.extend_leases(
                    conn,
                    run_ids=[s.run_id for s in slots],
                    epochs=[s.epoch for s in slots],
                    lease=self.lease,
                )
        for slot in slots:
            if slot.run_id in kept:
                slot.renew(sent)
        lost = [s for s in slots if s.run_id not in kept]
        if lost:
            self._on_lost(lost)
        return lost

    async def run(self) -> None:
        """Beat every `interval` until canceled; a failed round is logged and retried."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.beat()
            except RippleError as exc:
                log.warning("worker_heartbeat_failed", error=str(exc))
