"""The retention sweeper: deletes what retention allows, in bounded batches, never active runs.

What goes, each sweep (settings in parentheses):
- terminal runs (completed, failed, canceled) whose `completed_at` is older than the retention
  snapshotted at start (`retention_seconds`; `default_run_retention_days` for runs of
  workflows that declare none), clamped by `max_run_retention_days`, with their journal, waits
  and unconsumed signals;
  a run with `hold` set is kept whatever its age;
- the time partitions of events, webhook deliveries and their attempts whose whole range is
  older than `event_retention_days`, detached and dropped whole (platform/ops/partitions.py);
  a delivery partition with a delivery still pending is kept, with its attempts; the
  idempotency keys of the events dropped become reusable; signal idempotency keys older than
  that retention;
- the time partitions of queue dead letters that died over `dead_letter_retention_days` ago,
  dropped the same way; before that, messages a receiver marked dying but died before moving
  (through the `DeadLetterUpkeep` port) are moved to the dead letters;
- and before that, the partitions of the next `partitions_ahead` intervals are created.

Each sweep also folds the run count changes the run triggers appended into the dashboard's run
count rollup (through the same port), after the runs it deleted added theirs.

Each batch of the row-by-row kinds (`sweep_batch_size` rows, `FOR UPDATE SKIP LOCKED`; a
runs batch also stops at 20 journal rows per run on average) is its own short transaction; a
kind is swept until a batch comes back short. Several workers may sweep at once: locked rows
are skipped, not waited for. Counts go to `sweeper_deleted_total{kind}`, once each batch committed.

The workflow tables belong to the workflow store: the sweeper asks it to delete what expired
through the `RunRetention` port (platform/ops/ports.py), which `Client` wires in. A sweeper without
one (a process that never runs workflows) sweeps events and webhook deliveries only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from ripple.platform.core import db
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool
from ripple.platform.core.logs import get_logger
from ripple.platform.errors import ConfigError
from ripple.platform.ops import metrics
from ripple.platform.ops.partitions import Partitions
from ripple.platform.ops.ports import AuditRetention, DeadLetterUpkeep, RunRetention

__all__ = ["KINDS", "Sweeper"]

log = get_logger("ripple.sweeper")

_DAY = 86_400.0
#: Seconds a message stays marked dying before the sweeper moves it: a live receiver moves it
#: with its next statement.
STRAGGLER_AGE = 60.0
#: Journal rows a runs batch may delete per run on average (a batch of long runs is cut short).
_JOURNAL_ROWS_PER_RUN = 20

#: The `kind` values of `sweeper_deleted_total` and of `sweep_once()`'s result.
KINDS = (
    "runs",
    "steps",
    "waits",
    "signals",
    "events",
    "signal_keys",
    "webhook_deliveries",
    "webhook_attempts",
    "queue_dead_letters",
    "audit",
)

_Batch = Callable[[Connection], Awaitable[tuple[dict[str, int], bool]]]


class Sweeper:
    """Background service deleting expired runs, events and delivery logs.

    Args:
        pool: the database.
        runs: the workflow store's retention (runs, their journals, waits, signals and signal
            keys); None sweeps events and webhook deliveries only.
        audit: the audit trail's retention; None keeps audit entries.
        dead_letters: the queues' dead-letter upkeep; None leaves messages marked dying to
            the next listing or redrive of their queue's dead letters.
        settings: retention (`default_run_retention_days`, `max_run_retention_days`,
            `event_retention_days`, `audit_retention_days`), the period of
            `run()` (`sweep_interval`), the batch size (`sweep_batch_size`) and the
            partitions (`partition_interval`, `partitions_ahead`).
    """

    name = "sweeper"

    def __init__(
        self,
        pool: Pool,
        settings: Settings,
        *,
        runs: RunRetention | None = None,
        audit: AuditRetention | None = None,
        dead_letters: DeadLetterUpkeep | None = None,
    ) -> None:
        self._pool = pool
        self._settings = settings
        self._runs = runs
        self._audit = audit
        self._dead_letters = dead_letters
        self._stopping = asyncio.Event()
        self.partitions = Partitions(pool, settings)

    async def sweep_once(self) -> dict[str, int]:
        """Sweep every kind until nothing expired is left; return rows deleted per kind."""
        batch = self._settings.sweep_batch_size
        max_run = self._settings.max_run_retention_days * _DAY
        default_run = self._settings.default_run_retention_days * _DAY
        events = self._settings.event_retention_days * _DAY
        totals = dict.fromkeys(KINDS, 0)

        retention = self._runs

        async def runs(conn: Connection) -> tuple[dict[str, int], bool]:
            assert retention is not None
            return await retention.delete_expired_runs(
                conn,
                max_retention=max_run,
                default_retention=default_run,
                batch=batch,
                journal_budget=batch * _JOURNAL_ROWS_PER_RUN,
            )

        async def signal_keys(conn: Connection) -> tuple[dict[str, int], bool]:
            assert retention is not None
            deleted = await retention.delete_old_signal_keys(conn, retention=events, batch=batch)
            return {"signal_keys": deleted}, deleted >= batch

        async def run_counts(conn: Connection) -> tuple[dict[str, int], bool]:
            assert retention is not None
            _folded, more = await retention.fold_run_counts(conn, batch=batch)
            return {}, more

        audit_retention = self._audit
        audit_seconds = self._settings.audit_retention_days * _DAY

        async def audit(conn: Connection) -> tuple[dict[str, int], bool]:
            assert audit_retention is not None
            deleted = await audit_retention.delete_old_audit(
                conn, retention=audit_seconds, batch=batch
            )
            return {"audit": deleted}, deleted >= batch

        steps: list[_Batch] = []
        if retention is not None:
            steps = [runs, run_counts, signal_keys]
        if audit_retention is not None:
            steps.append(audit)
        if self._dead_letters is not None:
            steps.append(self._bury_stragglers)
        for step in steps:
            await self._drain(step, totals)
        await self.partitions.ensure()
        dead = self._settings.dead_letter_retention_days * _DAY
        for kind, retired in (await self.partitions.retire(events, batch, dead)).items():
            if retired:
                totals[kind] += retired
                metrics.SWEEPER_DELETED.labels(kind).inc(retired)
        if any(totals.values()):
            log.info("sweep_finished", **totals)
        return totals

    async def _bury_stragglers(self, conn: Connection) -> tuple[dict[str, int], bool]:
        """One batch of messages left marked dying by receivers that died."""
        assert self._dead_letters is not None
        batch = self._settings.sweep_batch_size
        moved = await self._dead_letters.bury_stragglers(
            conn, older_than=STRAGGLER_AGE, batch=batch
        )
        if moved:
            log.warning("queue_dead_letters_moved_for_a_dead_receiver", messages=moved)
        return {}, moved >= batch

    async def _drain(self, step: _Batch, totals: dict[str, int]) -> None:
        """Run `step`, each batch in its own transaction, until it reports nothing more left."""
        while True:
            async with db.transaction(self._pool) as conn:
                counts, more = await step(conn)
            for kind, deleted in counts.items():
                if deleted:
                    totals[kind] += deleted
                    metrics.SWEEPER_DELETED.labels(kind).inc(deleted)
            if not more or self._stopping.is_set():
                return

    async def run(self) -> None:
        """Sweep every `settings.sweep_interval` seconds until `stop()`; errors are logged."""
        while not self._stopping.is_set():
            try:
                await self.sweep_once()
            except Exception:  # a failed sweep must not stop the worker; the next one retries
                log.exception("sweep_failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._settings.sweep_interval)

    def stop(self) -> None:
        self._stopping.set()

    async def hold(self, run_id: str, hold: bool = True) -> bool:
        """Exempt a run from retention (or clear that); False if there is no such run."""
        if self._runs is None:
            raise ConfigError(
                "this Sweeper has no run retention: pass runs= (Client.hold wires it)"
            )
        async with db.transaction(self._pool) as conn:
            return await self._runs.set_hold(conn, run_id=run_id, hold=hold)
