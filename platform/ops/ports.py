"""Ports: what the foundation asks of the modules that own the workflow tables.

The foundation (sweeper, gauges, publish) never imports the workflow runtime, nor names its
tables in SQL; `Client` wires the workflow store's implementations in (as it wires the
`EventWaitResolver` of `fanout`). Each method runs in the caller's connection or transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ripple.platform.core.db import Connection

__all__ = ["AuditRetention", "RunRetention", "RunStats", "StrandedGauge"]


class AuditRetention(Protocol):
    """Deletes expired audit trail entries (the access domain's side of retention)."""

    async def delete_old_audit(self, conn: Connection, *, retention: float, batch: int) -> int:
        """Delete one batch (at most `batch`) of entries older than `retention` seconds."""
        ...


class DeadLetterUpkeep(Protocol):
    """Finishes what a receiver that died left half done: a receive marks a message dying and
    its next statement moves it to the dead letters (the queue domain's side)."""

    async def bury_stragglers(self, conn: Connection, *, older_than: float, batch: int) -> int:
        """Move one batch (at most `batch`) of messages marked dying over `older_than`
        seconds ago to the dead letters; how many."""
        ...


class RunRetention(Protocol):
    """Deletes what retention allows of the workflow tables, one bounded batch per call."""

    async def delete_expired_runs(
        self,
        conn: Connection,
        *,
        max_retention: float,
        default_retention: float,
        batch: int,
        journal_budget: int,
    ) -> tuple[dict[str, int], bool]:
        """Delete one batch of terminal, unheld runs past their retention (seconds, the run's
        snapshot clamped by `max_retention`; `default_retention` without one), with their
        journal, waits and signals; at most `journal_budget` journal rows unless one run has
        more. Returns rows deleted by kind (`runs`, `steps`, `waits`, `signals`) and whether
        more may be left."""
        ...

    async def delete_old_signal_keys(
        self, conn: Connection, *, retention: float, batch: int
    ) -> int:
        """Delete one batch of signal idempotency keys older than `retention` seconds."""
        ...

    async def set_hold(self, conn: Connection, *, run_id: str, hold: bool) -> bool:
        """Exempt a run from retention (or clear that); False if there is no such run."""
        ...

    async def fold_run_counts(self, conn: Connection, *, batch: int) -> tuple[int, bool]:
        """Fold one batch (at most `batch` rows) of run count changes into the dashboard's
        run count rollup; returns the rows folded and whether more may be left."""
        ...


@dataclass(frozen=True, slots=True)
class StrandedGauge:
    """Active runs of one (workflow, version) that no live worker serves."""

    workflow: str
    #: None while no worker has pinned the run's version yet.
    version: int | None
    runs: int


class RunStats(Protocol):
    """Read-only run counts for the gauges and operator views."""

    async def count_runs(self, conn: Connection) -> dict[str, dict[str, int]]:
        """`{workflow: {status: count}}` over every run the database holds."""
        ...

    async def count_stranded_runs(
        self, conn: Connection, *, live_seconds: float
    ) -> list[StrandedGauge]:
        """Active runs whose workflow no live worker (heartbeat younger than `live_seconds`)
        serves at their pinned version, by (workflow, version)."""
        ...
