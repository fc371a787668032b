"""`Worker`: claims runs of the workflows it serves and executes them, up to `concurrency` at
once, beside the background services of its process (webhook dispatcher, sweeper, scheduler).

Loop: claim as many due runs as there are free slots (one statement, `FOR UPDATE SKIP
LOCKED`), execute each inline in its own task until it completes or suspends, and sleep until
the next run is due (computed from Postgres) or a RunReady hint arrives. A `LeaseHeartbeat`
extends the leases of in-flight runs (fenced by epoch) and a `CancelListener` watches for
cancels; a run whose lease cannot be extended, or that was canceled, has its task canceled. On
stop: no new claims, running steps finish within `shutdown_grace`, the rest are released.

`run()` and `async with` run the worker's executor and the client's background services with
one `ProcessRunner` (`services()` lists them), the same composition `ripple worker` uses.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final, Protocol, Self

import structlog

from ripple.platform.core.config import Settings
from ripple.platform.core.db import (
    Connection,
    DedicatedConnection,
    Pool,
    create_pool,
    map_errors,
    worker_db_timeout,
)
from ripple.platform.core.ids import new_id
from ripple.platform.core.logs import Outage, get_logger
from ripple.platform.core.wake import CH_RUNS, Listener, NullWaker
from ripple.platform.errors import RippleError, Unavailable
from ripple.platform.ops import metrics, tracing
from ripple.platform.ops.runner import ProcessRunner
from ripple.platform.ops.services import BackgroundService
from ripple.workflows import store
from ripple.workflows.authoring.definition import WorkflowDefinition
from ripple.workflows.errors import JournalUnavailable, LeaseLost
from ripple.workflows.journal import Entry
from ripple.workflows.runs.client import WorkflowClient
from ripple.workflows.runtime.bodies import sync_bodies_running
from ripple.workflows.runtime.cancels import CancelListener
from ripple.workflows.runtime.engine import RunExecution
from ripple.workflows.runtime.heartbeat import LeaseHeartbeat
from ripple.workflows.runtime.ports import Outcome
from ripple.workflows.runtime.writer import PgRunWriter, StepCommitter
from ripple.workflows.store import approvals as approval_store

__all__ = ["Worker", "WorkerClient"]

log = get_logger("ripple.workflows.worker")

#: Seconds a worker claims with flow control directly after a plain claim found runs that
#: need it (a flow-controlled stream); then it tries the cheaper plain claim again.
GOVERNED_HOLD = 5.0
#: Empty claims `run_until_idle` retries while a run is due before it returns: a fair claim
#: can come back empty while a key behind the front has a due run (each claim settles the dry
#: keys of its front, so the next one reaches further).
IDLE_RECHECKS = 8
#: Longest pause between attempts to start while the database is unavailable.
START_BACKOFF_MAX = 5.0
#: Longest pause between claims while the database is unavailable.
CLAIM_BACKOFF_MAX = 2.0
#: Session settings of the claim loop's own connection (see `Worker.__init__`);
#: `python -m bench.claim_plans` measures the plan cache mode. No JIT: a generic plan's
#: estimates grow with the tables, and compiling a claim that touches a few rows costs far more
#: than running it.
CLAIMER_SETTINGS: Final[Mapping[str, str]] = {
    "application_name": "ripple-worker",
    "synchronous_commit": "off",
    "plan_cache_mode": "force_generic_plan",
    "jit": "off",
}


class WorkerClient(Protocol):
    """What a worker needs from the platform client (`ripple.platform.client.Client`)."""

    @property
    def pool(self) -> Pool: ...

    @property
    def waker(self) -> NullWaker: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def workflows(self) -> WorkflowClient: ...

    def background_services(self, *, webhooks: bool, sweeper: bool) -> list[BackgroundService]: ...


def _claim_backoff(poll: float, failures: int) -> float:
    """Seconds to wait before the next claim after `failures` failed ones in a row: the poll
    interval, doubling per failure up to CLAIM_BACKOFF_MAX (or the poll interval, if longer)."""
    return min(poll * 2.0 ** min(failures - 1, 10), max(poll, CLAIM_BACKOFF_MAX))


@dataclass(slots=True, eq=False)
class _InFlight:
    """One claim being executed: a run id may be claimed again (by this worker too) after its
    lease was lost, so a slot is told apart by its epoch, and compared by identity."""

    run_id: str
    epoch: int
    task: asyncio.Task[None] | None = None
    engine: RunExecution | None = None
    #: Claimed in isolation (its last worker was lost) and no step of it recorded since:
    #: the worker claims nothing beside it.
    suspect: bool = False

    def renew(self, sent: float) -> None:
        """The heartbeat extended this claim's lease (its statement was sent at `sent`)."""
        if self.engine is not None:
            self.engine.renew_lease(sent)


class Worker:
    """Executes workflow runs of the given definitions.

    Args:
        client: a connected `Client`.
        workflows: the definitions (several versions of one name may be served side by side).
        concurrency: runs executed at once.
        webhooks: also run the webhook dispatcher in this process.
        sweeper: also run the retention sweeper in this process.
        handle_signals: `run()` stops gracefully on SIGTERM and SIGINT (as `ripple worker`
            does); pass False when the application handles signals itself.
    """

    def __init__(
        self,
        client: WorkerClient,
        workflows: Sequence[WorkflowDefinition[Any, Any]],
        concurrency: int = 100,
        webhooks: bool = True,
        sweeper: bool = True,
        handle_signals: bool = True,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.handle_signals = handle_signals
        self.client = client
        self.concurrency = concurrency
        self._webhooks = webhooks
        self._sweeper = sweeper
        self._defs: dict[tuple[str, int], WorkflowDefinition[Any, Any]] = {}
        for definition in workflows:
            if not isinstance(definition, WorkflowDefinition):
                raise TypeError(f"{definition!r} is not a @workflow definition")
            self._defs[(definition.name, definition.version)] = definition
        self._pairs = sorted(self._defs)
        #: Served workflows that declare Fairness: every claim goes through the fair claim.
        self._fair = sorted({name for (name, _), d in self._defs.items() if d.fairness})
        #: Loop time until which claims go through flow control directly: a plain claim
        #: (without it; see `store.claim_runs_plain`) found runs it must decide, so more are
        #: likely. Until then, and again once it passes, the plain claim comes first.
        self._governed_until = float("-inf")
        self.worker_id = f"{socket.gethostname()}-{os.getpid()}-{new_id()[-12:]}"
        self._inflight: dict[str, _InFlight] = {}
        #: A claim passed over a due suspect: claim nothing more until nothing is in flight,
        #: then claim alone (which takes it), so a busy worker does not leave it waiting.
        self._suspect_waiting = False
        self._stopping = False
        #: Signs the approval links `ctx.step.approval_url` gives (loaded at start).
        self._approval_key: bytes | None = None
        self._stop_requested = asyncio.Event()
        #: The claim loop's database outage: logged once, counted, its end logged once.
        self._outage = Outage(log, "worker_claim_failed", "worker_claim_recovered")
        self._backlog = False
        self._until_idle = False
        #: loop time at which the next known run becomes due (None: unknown, poll)
        self._due: float | None = None
        self._due_checked = float("-inf")
        self._listener: Listener | None = None
        self._main: asyncio.Task[None] | None = None
        #: The runner of `run()` / `async with` while it runs (`stop()` stops its services).
        self._runner: ProcessRunner | None = None
        self._started = asyncio.Event()
        #: Why a helper task (heartbeat, cancel listener) ended while the worker ran.
        self._helper_failure: BaseException | None = None
        #: Opening the pool at start (kept referenced: it outlives a canceled run()).
        self._warming: asyncio.Task[None] | None = None
        # The claim loop's own connection. Its commits are asynchronous (not waiting for the
        # WAL flush): a claim lost with a Postgres crash only returns the run to the queue,
        # and the epoch a claim assigns grows by a random amount, so a claimer whose claim was
        # lost is fenced out even if the run is claimed again. Journal writes stay synchronous.
        # Its statements keep their generic plans: for a worker serving one workflow, Postgres
        # planned the claim again on every execution, most of its round trip (`python -m
        # bench.claim_plans` measures it), and the claim's writes find their rows by ctid, so
        # its generic plan does not depend on the table's size (docs/architecture.md, "A claim
        # is planned once").
        self._claimer = DedicatedConnection(client.settings, **CLAIMER_SETTINGS)
        #: The worker's own pool, open while it runs: its statements are bounded by
        #: `worker_db_timeout` (default the lease), not by the API's RIPPLE_DB_TIMEOUT.
        self._pool: Pool | None = None
        #: Group commit of the step flushes of every run this worker executes.
        self.committer = StepCommitter(client.pool, lease=client.settings.lease_seconds)
        #: Extends the leases of the runs in flight; aborts the ones it lost.
        self.heartbeat = LeaseHeartbeat(
            pool=lambda: self.pool,
            worker_id=self.worker_id,
            lease=client.settings.lease_seconds,
            held=self._held,
            on_lost=self._lease_lost,
        )
        #: Aborts the runs in flight that get canceled.
        self.cancels = CancelListener(
            waker=client.waker,
            pool=lambda: self.pool,
            running=lambda: list(self._inflight),
            on_canceled=self._canceled,
        )
        client.workflows.registry.register(*workflows)

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self.client.settings

    @property
    def pool(self) -> Pool:
        """The pool of the worker's writes (its own while running, else the client's)."""
        return self._pool if self._pool is not None else self.client.pool

    async def _open_pool(self) -> None:
        if self._pool is None:
            # Connects get the worker's bound too: a new connection opened mid-stall is healthy.
            bound = worker_db_timeout(self.settings)
            self._pool = await create_pool(self.settings, command_timeout=bound, timeout=bound)
            self.committer.pool = self._pool

    async def _close_pool(self) -> None:
        pool, self._pool = self._pool, None
        self.committer.pool = self.client.pool
        if pool is None:
            return
        try:
            await asyncio.wait_for(pool.close(), self.settings.shutdown_grace + 5.0)
        except (TimeoutError, OSError, RippleError):
            pool.terminate()

    def stop(self) -> None:
        """Stop claiming, and the services run beside; in-flight runs finish their running
        step, then are released."""
        self._stop_claiming()
        if self._runner is not None:
            self._runner.stop()

    def _stop_claiming(self) -> None:
        self._stopping = True
        self._stop_requested.set()
        self._kick()

    def _kick(self) -> None:
        if self._listener is not None:
            self._listener.poke()

    def services(self) -> list[BackgroundService]:
        """What this worker runs in its process: its run executor, then the client's
        background services (webhook dispatcher and sweeper as switched on, the scheduler).
        `run()` runs them with a `ProcessRunner`; a process composing more services (the
        CLI's, with the API) gives these to its own runner instead."""
        services: list[BackgroundService] = [_Executor(self)]
        services += self.client.background_services(webhooks=self._webhooks, sweeper=self._sweeper)
        return services

    async def run(self) -> None:
        """Run until `stop()`, SIGTERM or SIGINT (a stop requested before the loop started is
        honoured). On stop: no new claims, running steps get `RIPPLE_SHUTDOWN_GRACE` seconds
        to finish, and the rest are released for other workers. If a service run beside
        fails, the others are stopped and its error is raised."""
        runner = ProcessRunner(self.services(), name="worker", handle_signals=self.handle_signals)
        await self._run_services(runner)

    async def _run_services(self, runner: ProcessRunner) -> None:
        self._runner = runner
        try:
            await runner.run()
        finally:
            if self._runner is runner:
                self._runner = None

    async def _execute_runs(self) -> None:
        """The executor: claim and execute runs until stopped, then drain and unregister."""
        self._started.clear()
        self._helper_failure = None
        if not await self._start_until_stopped():
            return
        # Its own task, shielded: canceling run() here must not leave a connection acquired.
        self._warming = asyncio.create_task(self._open_connections(), name="ripple-warm-pool")
        await asyncio.shield(self._warming)
        helpers = [
            asyncio.create_task(self.heartbeat.run(), name="ripple-worker-heartbeat"),
            asyncio.create_task(self.cancels.run(), name="ripple-worker-cancels"),
        ]
        for task in helpers:
            task.add_done_callback(self._helper_ended)
        self._started.set()
        log.info("worker_started", worker_id=self.worker_id, serves=self._serves())
        try:
            await self._loop(until_idle=False)
        finally:
            await self._drain()
            for task in helpers:
                task.remove_done_callback(self._helper_ended)
                task.cancel()
            await asyncio.gather(*helpers, return_exceptions=True)
            await self._unregister()
            await self._claimer.close()
            await self._close_pool()
            log.info("worker_stopped", worker_id=self.worker_id)
        if self._helper_failure is not None:
            raise self._helper_failure

    def _helper_ended(self, task: asyncio.Task[None]) -> None:
        """The heartbeat and the cancel listener retry transient errors themselves; one that
        ends anyway is a bug, and running on without it would let leases lapse unnoticed:
        stop the executor, which re-raises the error (the process exits non-zero)."""
        if task.cancelled() or self._stopping:
            return
        exc = task.exception() or RuntimeError(f"{task.get_name()} returned unexpectedly")
        log.error("worker_helper_failed", helper=task.get_name(), error=repr(exc))
        self._helper_failure = exc
        self._stop_claiming()

    async def run_until_idle(self) -> None:
        """Execute runs until none is due and none is in flight (for tests and scripts; no
        background services)."""
        self._until_idle = True
        await self._open_pool()
        try:
            await self._register()
        except BaseException:
            await self._close_pool()
            raise
        heartbeat = asyncio.create_task(self.heartbeat.run())
        try:
            await self._loop(until_idle=True)
        finally:
            self._until_idle = False
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
            await self._drain()
            await self._unregister()
            await self._claimer.close()
            await self._close_pool()

    async def __aenter__(self) -> Self:
        self._stopping = False
        self._stop_requested.clear()
        # The block's owner decides when it ends: no signal handlers of the worker's own.
        runner = ProcessRunner(self.services(), name="worker", handle_signals=False)
        self._main = asyncio.create_task(self._run_services(runner), name="ripple-worker")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
        if self._main is not None:
            main, self._main = self._main, None
            await main

    def _serves(self) -> list[dict[str, Any]]:
        return [{"workflow": name, "version": version} for name, version in self._pairs]

    async def _start_until_stopped(self) -> bool:
        """Open the worker's pool and register, retrying with backoff while the database is
        unavailable (a worker may start while Postgres restarts); False if the worker was
        stopped first."""
        delay = self.settings.poll_interval
        failures = 0
        while not self._stopping:
            try:
                await self._open_pool()
                await self._register()
                self._approval_key = await self._load_approval_key()
            except Unavailable as exc:
                await self._close_pool()
                failures += 1
                if failures == 1:
                    log.warning("worker_start_failed", error=str(exc), retrying=True)
                await self._sleep_unless_stopped(delay)
                delay = min(delay * 2, START_BACKOFF_MAX)
                continue
            except BaseException:
                await self._close_pool()
                raise
            if failures:
                log.info("worker_start_recovered", failed_attempts=failures)
            return True
        return False

    async def _sleep_unless_stopped(self, seconds: float) -> None:
        """Sleep, returning early when `stop()` is called."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop_requested.wait(), seconds)

    async def _load_approval_key(self) -> bytes:
        """The approval links' signing key, through the worker's own pool (its outage rule)."""
        with map_errors():
            return await approval_store.approval_key(self.pool)

    async def _register(self) -> None:
        with map_errors():
            await store.register_worker(
                self.pool,
                worker_id=self.worker_id,
                hostname=socket.gethostname(),
                pid=os.getpid(),
                serves=self._serves(),
            )

    async def _open_connections(self) -> None:
        """Open the pool's connections before the first claim. Opening one holds this
        process's event loop for a while (handshake, codecs), which otherwise lands on the runs
        executing when a burst first needs it. (After ~5 idle minutes asyncpg closes idle
        connections again; the first burst after that pays for reopening them.)"""
        pool = self.pool
        target = min(self.concurrency + 2, pool.get_max_size())
        if pool.get_size() >= target:
            return
        opened = await asyncio.gather(
            *(pool.acquire(timeout=5.0) for _ in range(target)), return_exceptions=True
        )
        for conn in opened:
            if not isinstance(conn, BaseException):
                await pool.release(conn)

    async def _unregister(self) -> None:
        with contextlib.suppress(RippleError), map_errors():
            await store.delete_worker(self.pool, worker_id=self.worker_id)

    # -- the claim loop ----------------------------------------------------------------------

    async def _loop(self, *, until_idle: bool) -> None:
        poll = self.settings.poll_interval
        loop = asyncio.get_running_loop()
        async with self.client.waker.listen(CH_RUNS) as listener:
            self._listener = listener
            try:
                rechecks = 0
                while not self._stopping:
                    free = self._free_slots()
                    # With a backlog, claim in batches rather than one run per freed slot.
                    batch = max(1, self.concurrency // 10) if self._backlog else 1
                    if free >= batch:
                        claimed = await self._claim(free)
                        self._backlog = claimed == free
                        rechecks = 0 if claimed else rechecks
                        if self._backlog:
                            await asyncio.sleep(0)  # let the new runs start
                            continue
                        if until_idle and claimed == 0 and not self._inflight:
                            if rechecks < IDLE_RECHECKS and await self._due_now():
                                rechecks += 1
                                continue
                            return
                        # Nothing else is due now: sleep exactly until the next run is due.
                        # After a claim that found work, the cached due time is kept for a
                        # quarter poll interval: the next claim finds any due run anyway, and
                        # this worker's own timers are tracked exactly by `_note_due`. This
                        # halves the queries per claim cycle under a stream of starts.
                        if claimed == 0 or loop.time() - self._due_checked > poll / 4:
                            secs = await self._next_due()
                            self._due_checked = loop.time()
                            self._due = None if secs is None else loop.time() + secs
                    timeout = poll
                    if self._due is not None:
                        timeout = min(poll, max(0.001, self._due - loop.time()))
                    await listener.wait(timeout)
                    if self._due is not None and loop.time() >= self._due:
                        # Consumed: the next due time must come from Postgres again.
                        self._due = None
                        self._due_checked = float("-inf")
            finally:
                self._listener = None

    def _note_due(self, wake_at: datetime) -> None:
        """A run this worker suspended is due at `wake_at`: wake the loop then."""
        if wake_at.tzinfo is None:
            # asyncpg decodes timestamptz 'infinity' as the naive datetime.max: never due.
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + (wake_at - datetime.now(UTC)).total_seconds()
        if self._due is None or due < self._due:
            self._due = due
            if due - loop.time() < self.settings.poll_interval:
                self._kick()

    async def _due_now(self) -> bool:
        """Whether a run this worker may claim is due now."""
        secs = await self._next_due()
        return secs is not None and secs <= 0

    async def _next_due(self) -> float | None:
        try:
            conn = await self._claimer.get()
            with map_errors():
                due = await store.next_due(conn, pairs=self._pairs)
        except RippleError as exc:
            self._claimer.discard()
            self._outage.failed(exc)
            return None
        self._outage.recovered()
        return due

    async def _claim(self, limit: int) -> int:
        try:
            conn = await self._claimer.get()
            with map_errors():
                # scoped(): behind a transaction pooler, SET LOCAL synchronous_commit instead.
                async with self._claimer.scoped(conn):
                    claims = await self._claim_runs(conn, limit)
                    resumed = [c.run_id for c in claims if not c.fresh]
                    journals = await store.load_journals(conn, run_ids=resumed) if resumed else {}
        except RippleError as exc:
            # The connection may be broken or mid-statement: a new one is opened next time.
            self._claimer.discard()
            self._outage.failed(exc)
            backoff = _claim_backoff(self.settings.poll_interval, self._outage.failures)
            await self._sleep_unless_stopped(backoff)
            return 0
        self._outage.recovered()
        for claim in claims:
            if claim.recovered:
                metrics.LEASE_EXPIRATIONS.inc()
                log.warning(
                    "run_lease_expired",
                    run_id=claim.run_id,
                    workflow=claim.workflow,
                    recoveries=claim.recoveries,
                )
            rows = journals.get(claim.run_id, [])
            slot = _InFlight(claim.run_id, claim.epoch, suspect=claim.suspect)
            stale = self._inflight.get(claim.run_id)
            if stale is not None:
                # The run left `running` (it suspended due at once, retried without delay, or
                # another worker took over its lost lease) before the older execution's task
                # ended: that execution is fenced out; stop it (its cleanup leaves the new
                # slot alone). Not a run lost by this worker itself: that is a suspect, and
                # suspects are claimed only with nothing in flight.
                self._abort([stale], "reclaimed")
            self._inflight[claim.run_id] = slot
            slot.task = asyncio.create_task(self._execute(slot, claim, rows))
        return len(claims)

    def _free_slots(self) -> int:
        """Slots a claim may fill now: none while a suspect runs (it is isolated until it
        records a step) or while the worker empties itself for a waiting suspect."""
        if self._inflight and (
            self._suspect_waiting or any(s.suspect for s in self._inflight.values())
        ):
            return 0
        return self.concurrency - len(self._inflight)

    async def _claim_runs(self, conn: Connection, limit: int) -> list[store.ClaimedRun]:
        """Claim with flow control while it was recently needed, else plainly first. Only a
        worker with nothing in flight claims a suspect, and then nothing beside it."""
        now = asyncio.get_running_loop().time()
        lease = self.settings.lease_seconds
        alone = not self._inflight
        if alone:
            self._suspect_waiting = False
        if now < self._governed_until:
            claims = await store.claim_runs(
                conn,
                worker_id=self.worker_id,
                lease=lease,
                limit=limit,
                pairs=self._pairs,
                alone=alone,
                fair=self._fair,
            )
        else:
            claims, governed, waiting = await store.claim_runs_plain(
                conn,
                worker_id=self.worker_id,
                lease=lease,
                limit=limit,
                pairs=self._pairs,
                alone=alone,
                fair=self._fair,
            )
            if governed:
                self._governed_until = now + GOVERNED_HOLD
            if waiting:
                self._suspect_waiting = True
        for claim in claims:
            if claim.suspect:
                log.info("run_claimed_alone", run_id=claim.run_id, recoveries=claim.recoveries)
        return claims

    def _cleared(self, slot: _InFlight) -> None:
        """The suspect of `slot` recorded a step: other runs may be claimed beside it."""
        slot.suspect = False
        self._kick()

    async def _execute(
        self, slot: _InFlight, claim: store.ClaimedRun, rows: list[store.JournalRow]
    ) -> None:
        definition = self._defs[(claim.workflow, claim.version)]
        entries = [Entry.from_row(row) for row in rows]
        writer = PgRunWriter(
            self.pool,
            self.client.waker,
            run_id=claim.run_id,
            epoch=claim.epoch,
            workflow=claim.workflow,
            lease=self.settings.lease_seconds,
            trace=claim.trace,
            may_have_waits=any(e.kind == "wait" and not e.finished for e in entries),
            parent_run_id=claim.parent_run_id,
            committer=self.committer,
            keyed=claim.keyed,
            on_cleared=(lambda: self._cleared(slot)) if claim.suspect else None,
            contracts=self.client.workflows.contracts,
        )
        engine = RunExecution(
            claim,
            definition,
            entries,
            writer,
            max_steps=self.settings.max_steps_per_run,
            is_stopping=lambda: self._stopping,
            resolve=self.client.workflows.registry.resolve,
            lease=self.settings.lease_seconds,
            max_recoveries=self.settings.max_recoveries,
        )
        engine.approval_key = self._approval_key
        engine.approval_public_url = self.settings.public_url
        slot.engine = engine
        in_flight = metrics.RUNS_IN_FLIGHT.labels(claim.workflow)
        in_flight.inc()
        outcome: Outcome | None = None
        try:
            with structlog.contextvars.bound_contextvars(
                run_id=claim.run_id, workflow=claim.workflow
            ):
                if tracing.recording():
                    with tracing.span("workflow.run", parent=claim.trace, run_id=claim.run_id):
                        outcome = await engine.execute()
                else:
                    outcome = await engine.execute()
        except LeaseLost:
            log.warning("run_lease_lost", run_id=claim.run_id, epoch=claim.epoch)
        except (JournalUnavailable, Unavailable) as exc:
            # A journal write of the run, or its final one, met a database outage: hand the
            # run back if the database answers again by now, else its lease lapses and it is
            # claimed again.
            log.warning("run_abandoned_database_unavailable", run_id=claim.run_id, error=str(exc))
            with contextlib.suppress(RippleError), map_errors():
                await store.release_run(self.pool, run_id=claim.run_id, epoch=claim.epoch)
        except asyncio.CancelledError:
            log.info("run_task_canceled", run_id=claim.run_id)
        except Exception:
            log.exception("run_execution_error", run_id=claim.run_id)
        finally:
            in_flight.dec()
            if self._inflight.get(claim.run_id) is slot:
                del self._inflight[claim.run_id]
            if (
                self._backlog
                or self._until_idle
                or self._stopping
                or slot.suspect
                or self._suspect_waiting
            ):
                self._kick()  # the loop may be waiting for a free slot
        if outcome is not None and outcome.wake_at is not None:
            self._note_due(outcome.wake_at)

    # -- leases, cancels, shutdown -----------------------------------------------------------

    def _abort(self, slots: Sequence[_InFlight], reason: str) -> None:
        for slot in slots:
            if slot.task is None or slot.task.done():
                continue
            if slot.engine is not None and slot.engine.concluding:
                continue  # its final write is fenced; canceling could tear the commit
            log.info("run_aborted", run_id=slot.run_id, epoch=slot.epoch, reason=reason)
            slot.task.cancel()

    def _held(self) -> list[_InFlight]:
        return list(self._inflight.values())

    def _lease_lost(self, slots: Sequence[_InFlight]) -> None:
        self._abort(slots, "lease_lost")

    def _canceled(self, run_ids: set[str]) -> None:
        self._abort([s for s in list(self._inflight.values()) if s.run_id in run_ids], "canceled")

    async def _drain(self) -> None:
        """Let running steps finish within the grace period; release the rest at once."""
        slots = [s for s in self._inflight.values() if s.task is not None]
        if not slots:
            return
        tasks = [s.task for s in slots if s.task is not None]
        _, pending = await asyncio.wait(tasks, timeout=self.settings.shutdown_grace)
        stuck = [s for s in slots if s.task in pending]
        for slot in stuck:
            assert slot.task is not None
            slot.task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for slot in stuck:
            with contextlib.suppress(RippleError), map_errors():
                await store.release_run(self.pool, run_id=slot.run_id, epoch=slot.epoch)
        if stuck:
            log.warning("worker_released_runs", count=len(stuck))
        if sync_bodies_running():
            # Their runs are released (another worker may run those steps now); the threads
            # cannot be stopped and will run on until their functions return. Their results
            # are never written: the tasks that would record them are canceled.
            log.warning("worker_sync_steps_abandoned", threads=sync_bodies_running())


class _Executor:
    """A worker's run executor as a service of its process (see `Worker.services()`)."""

    name = "workflow-executor"

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    async def run(self) -> None:
        await self._worker._execute_runs()

    def stop(self) -> None:
        self._worker._stop_claiming()

    async def started(self) -> None:
        """Returns once the worker registered and opened its connections."""
        await self._worker._started.wait()
