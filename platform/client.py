"""`Client`: the composition root users import; one object for the whole platform.

It owns the pool and the waker, applies migrations on connect, and composes the workflow
runtime, publish/fan-out with the three subscriber kinds, subscriptions and queues. It holds no
logic of its own beyond wiring: each method delegates to the module that owns the concept.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast, overload

from ripple.platform.core import migrate
from ripple.platform.core.config import Settings, load_settings
from ripple.platform.core.db import (
    Connection,
    Pool,
    create_pool,
    transaction,
    worker_db_timeout,
)
from ripple.platform.core.embedded import discover_dev_urls
from ripple.platform.core.wake import NullWaker, create_waker
from ripple.platform.errors import NotFound, RippleError
from ripple.platform.events.contracts.validation import Contracts
from ripple.workflows.runs.client import WorkflowClient

if TYPE_CHECKING:
    from ripple.platform.access.audit import Audit
    from ripple.platform.access.tokens import Tokens
    from ripple.platform.events.backfill import Backfills
    from ripple.platform.events.contracts.topics import Topics
    from ripple.platform.events.fanout import TargetKind
    from ripple.platform.events.history import EventPage, EventSearch
    from ripple.platform.events.publish import Explanation, Publisher, PublishResult
    from ripple.platform.events.subscriptions import Subscription, Subscriptions
    from ripple.platform.ops.observability import GaugeCollector
    from ripple.platform.ops.services import BackgroundService
    from ripple.platform.schedules.schedules import Schedules
    from ripple.subscribers import QueueTarget, Target, WebhookTarget, WorkflowTarget
    from ripple.subscribers.queues.queues import Queues
    from ripple.subscribers.webhooks.webhook import Deliveries
    from ripple.workflows.authoring.definition import WorkflowDefinition
    from ripple.workflows.runs.approvals import Approvals
    from ripple.workflows.runs.deploys import Deploys
    from ripple.workflows.runs.handle import RunHandle
    from ripple.workflows.runs.operations import RunOperations, WaitOutcome
    from ripple.workflows.runs.records import Page, Run, SignalResult, StepRecord
    from ripple.workflows.runs.verification import VerifyReport

__all__ = ["Client"]

OutT = TypeVar("OutT")


class Client:
    """One client for the whole platform: workflows, topics, subscriptions and queues.

    Args:
        database_url: Postgres DSN; default `RIPPLE_DATABASE_URL`, else a running `ripple dev`.
        redis_url: Redis URL for wake-ups; default `RIPPLE_REDIS_URL`. Optional: without it
            other processes notice work within the poll interval.
        settings: full settings, for tests and embedding (overrides the two URLs' defaults).

    Use as `async with Client() as client:`; connecting applies pending migrations. The parts
    (`workflows`, `queues`, `schedules`, `deliveries`, ...) are attributes from construction
    (each built on first access) and raise "client is not connected" when used before
    `connect()`.
    """

    def __init__(
        self,
        database_url: str | None = None,
        redis_url: str | None = None,
        *,
        settings: Settings | None = None,
    ) -> None:
        self.settings: Settings = _resolve_settings(settings, database_url, redis_url)
        self._pool: Pool | None = None
        self._read_pool: Pool | None = None
        #: The background writers' pool (webhook dispatcher, sweeper): see `connect()`.
        self._background_pool: Pool | None = None
        self._waker: NullWaker | None = None
        #: `close()` drops the connections without the protocol's goodbye (`for_command`).
        self._abandon_connections = False
        # The parts reach the pools and the waker through these accessors, so they work before
        # `connect()` is called and raise "client is not connected" until then.
        self._parts_pool = cast(Pool, _ConnectedPool(lambda: self.pool))
        self._parts_read_pool = cast(Pool, _ConnectedPool(lambda: self.read_pool))
        self._wakes = cast(NullWaker, _ConnectedWaker(self))
        #: Each topic's latest schema, compiled (publish, matches and filters are checked).
        self.contracts: Contracts = Contracts(self._parts_pool, self._wakes, self.settings)
        #: Runs: start, read, signal, cancel (the flat run methods below delegate to it).
        self.workflows: WorkflowClient = WorkflowClient(
            self._parts_pool,
            self._wakes,
            self.settings,
            read_pool=self._parts_read_pool,
            contracts=self.contracts,
        )
        #: Approvals of runs: `list`, `get`, `decide` (`ctx.step.wait_for_approval`).
        self.approvals: Approvals = self.workflows.approvals

    # The other parts are attributes too, built (and their modules imported) on first use: a
    # short command that reads runs does not load publish, webhooks, schedules or tokens.

    @functools.cached_property
    def _kinds(self) -> dict[str, TargetKind]:
        from ripple.subscribers.queues.queue import QueueKind
        from ripple.subscribers.webhooks.webhook import WebhookKind
        from ripple.subscribers.workflow import WorkflowKind

        return {
            "queue": QueueKind(self._wakes),
            "webhook": WebhookKind(self.settings, self._wakes),
            "workflow": WorkflowKind(self.workflows),
        }

    @functools.cached_property
    def subscriptions(self) -> Subscriptions:
        """Subscriptions and their cached compiled set (use the flat `*_subscription` methods)."""
        from ripple.platform.events.subscriptions import Subscriptions

        return Subscriptions(
            self._parts_pool, self._wakes, self.settings, self._kinds, self.contracts
        )

    @functools.cached_property
    def publisher(self) -> Publisher:
        """Publish and fan-out (use `publish` and `explain`)."""
        from ripple.platform.events.publish import Publisher

        return Publisher(
            self._parts_pool,
            self._wakes,
            self.settings,
            self.subscriptions,
            self._kinds,
            self.workflows,
            self.contracts,
        )

    @functools.cached_property
    def operations(self) -> RunOperations:
        """Retry, fork, bulk actions and waits on runs (use the flat methods)."""
        from ripple.workflows.runs.operations import RunOperations

        return RunOperations(self.workflows)

    @functools.cached_property
    def backfills(self) -> Backfills:
        """Backfills and replays of retained events (use `subscribe` and `replay_events`)."""
        from ripple.platform.events.backfill import Backfills

        return Backfills(self._parts_pool, self.settings, self._kinds)

    @functools.cached_property
    def events(self) -> EventSearch:
        """Published events by topic, window and payload (use `list_events`)."""
        from ripple.platform.events.history import EventSearch

        return EventSearch(self._parts_read_pool, self.settings)

    @functools.cached_property
    def topics(self) -> Topics:
        """Topic schemas: `register_schema`, `check_schema`, `get_schema`, `list_schemas`, ..."""
        from ripple.platform.events.contracts.topics import Topics

        return Topics(self._parts_pool, self.contracts)

    @functools.cached_property
    def tokens(self) -> Tokens:
        """API tokens: `create`, `list`, `revoke` (and the API's `authenticate`)."""
        from ripple.platform.access.rate_limits import RateLimiter
        from ripple.platform.access.tokens import Tokens
        from ripple.platform.events.topics import validate_pattern

        return Tokens(
            self._parts_pool,
            self._wakes,
            validate_pattern,
            RateLimiter(self.settings.redis_endpoint(), prefix=self.settings.redis_prefix),
        )

    @functools.cached_property
    def queues(self) -> Queues:
        """Queues: `send`, `receive`, `ack`, `nack`, `stats`, `dead_letters`, `redrive`."""
        from ripple.subscribers.queues.queues import Queues

        return Queues(self._parts_pool, self._wakes, self.settings)

    @functools.cached_property
    def schedules(self) -> Schedules:
        """Schedules managed at run time (`create`, `pause`, `resume`, `trigger`, `delete`)."""
        from ripple.platform.schedules.schedules import Schedules

        return Schedules(self._parts_pool, _Firing(self), self._wakes)

    @functools.cached_property
    def deliveries(self) -> Deliveries:
        """Webhook deliveries: `list`, `get`, `attempts`, `redrive`, `redrive_failed`."""
        from ripple.subscribers.webhooks.webhook import Deliveries

        return Deliveries(
            self._parts_pool, self._wakes, self.settings, read_pool=self._parts_read_pool
        )

    @functools.cached_property
    def audit(self) -> Audit:
        """The audit trail: `list` (the audited actions write it themselves)."""
        from ripple.platform.access.audit import Audit

        return Audit(self._parts_pool, self.settings)

    @functools.cached_property
    def deploys(self) -> Deploys:
        """Recorded runs for `verify` and exports, versions in use, early wakes."""
        from ripple.workflows.runs.deploys import Deploys

        return Deploys(self._parts_pool, self._parts_read_pool, self._wakes)

    @functools.cached_property
    def gauges(self) -> GaugeCollector:
        """Refreshes the gauges computed from Postgres (call before exposing `/metrics`)."""
        from ripple.platform.ops.observability import GaugeCollector

        return GaugeCollector(self._parts_pool, self.settings, runs=self.workflows.upkeep)

    @classmethod
    def for_command(cls, *, settings: Settings | None = None, writes: bool = True) -> Client:
        """A client for one short command, such as a `ripple` operator command: a pool of one
        connection and, when the command only reads (`writes=False`), no Redis connection
        (wake hints follow writes only). Connecting still applies pending migrations.

        `close()` ends its connections at once instead of waiting for the server to
        acknowledge each goodbye: every call has committed or rolled back by then, and Postgres
        takes a client's end of a connection outside a transaction as a normal disconnect."""
        lean: dict[str, Any] = {"pool_min_size": 1}
        if not writes:
            lean["redis_url"] = None
            lean["redis_sentinels"] = []
        # The parts take the settings at construction: resolve them first, then build once.
        client = cls(settings=_resolve_settings(settings).model_copy(update=lean))
        client._abandon_connections = True
        return client

    # -- lifecycle ---------------------------------------------------------------------------

    async def connect(self) -> Self:
        """Open the pool, apply pending migrations, and start the wake layer."""
        if self._pool is not None:
            return self
        pool = await create_pool(self.settings)
        read_pool = pool
        try:
            await migrate.migrate_database(self.settings, pool)
            if self.settings.database_read_url is not None:
                read_pool = await create_pool(self.settings, dsn=self.settings.database_read_url)
            # The webhook dispatcher and the sweeper record what they did under the worker's
            # timeout rule, for statements and connects alike: RIPPLE_DB_TIMEOUT would cancel
            # a slow but healthy write of a sent delivery, which is then sent again. Opened
            # empty: it connects only when they run.
            patience = worker_db_timeout(self.settings)
            background_pool = await create_pool(
                self.settings, command_timeout=patience, timeout=patience, min_size=0
            )
        except BaseException:
            if read_pool is not pool:
                await read_pool.close()
            await pool.close()
            raise
        waker = create_waker(
            self.settings.redis_endpoint(),
            prefix=self.settings.redis_prefix,
            poll_interval=self.settings.poll_interval,
        )
        await waker.start()
        self._pool, self._read_pool, self._waker = pool, read_pool, waker
        self._background_pool = background_pool
        return self

    async def close(self) -> None:
        """Stop the wake layer and close the pool."""
        if self._waker is not None:
            # Only the parts built so far hold listeners.
            built = vars(self)
            if "subscriptions" in built:
                await self.subscriptions.close()
            await self.contracts.close()
            if "tokens" in built:
                await self.tokens.close()
            await self._waker.close()
            self._waker = None
        if self._read_pool is not None and self._read_pool is not self._pool:
            await self._close_pool(self._read_pool)
        self._read_pool = None
        if self._background_pool is not None:
            await self._close_pool(self._background_pool)
            self._background_pool = None
        if self._pool is not None:
            await self._close_pool(self._pool)
            self._pool = None

    async def _close_pool(self, pool: Pool) -> None:
        if self._abandon_connections:
            pool.terminate()
        else:
            await pool.close()

    async def __aenter__(self) -> Self:
        return await self.connect()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    @property
    def pool(self) -> Pool:
        """The asyncpg pool (for applications composing their own transactions)."""
        if self._pool is None:
            raise RippleError("client is not connected: use `async with Client() as client:`")
        return self._pool

    @property
    def read_pool(self) -> Pool:
        """The pool for list calls and dashboard reads: a replica's with
        `RIPPLE_DATABASE_READ_URL` (its rows may lag the primary), else `pool`."""
        if self._read_pool is None:
            raise RippleError("client is not connected: use `async with Client() as client:`")
        return self._read_pool

    @property
    def waker(self) -> NullWaker:
        if self._waker is None:
            raise RippleError("client is not connected: use `async with Client() as client:`")
        return self._waker

    def background_services(self, *, webhooks: bool, sweeper: bool) -> list[BackgroundService]:
        """The loops a worker process runs beside workflows (webhook dispatcher, sweeper).

        The dispatcher and the sweeper write through a pool whose statements are bounded by
        `worker_db_timeout` (RIPPLE_WORKER_DB_TIMEOUT, default the lease), as a worker's are.
        """
        # The dispatcher loads aiohttp: only processes that run it import it.
        from ripple.platform.ops.sweeper import Sweeper
        from ripple.platform.schedules.schedules import Scheduler
        from ripple.subscribers.queues import queue_store
        from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher

        writers = self.pool if self._background_pool is None else self._background_pool
        services: list[BackgroundService] = []
        if webhooks:
            services.append(WebhookDispatcher(writers, self.waker, self.settings))
        if sweeper:
            services.append(
                Sweeper(
                    writers,
                    self.settings,
                    runs=self.workflows.upkeep,
                    audit=self.audit,
                    dead_letters=queue_store.DeadLetterUpkeep(),
                )
            )
        services.append(Scheduler(self.schedules, self.settings, self._prepare_worker))
        return services

    async def _prepare_worker(self) -> None:
        """At a worker's start: store the flow-control options and the code schedules of the
        workflows this process registered (the worker registers the ones it serves)."""
        await self.workflows.sync_definitions()
        for definition in list(self.workflows.definitions.values()):
            if definition.schedule is not None:
                await self.schedules.register_code(definition.name, definition.schedule)

    async def hold(self, run_id: str, hold: bool = True) -> bool:
        """Exempt a run from retention (`hold=False` clears it); False if there is no such run."""
        async with transaction(self.pool) as conn:
            return await self.workflows.upkeep.set_hold(conn, run_id=run_id, hold=hold)

    # -- workflows ---------------------------------------------------------------------------

    @overload
    async def start(
        self,
        workflow: WorkflowDefinition[Any, OutT],
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        deadline: datetime | timedelta | float | None = None,
        version: int | None = None,
        priority: int = 0,
        conn: Connection | None = None,
        fairness_key: str | None = None,
    ) -> RunHandle[OutT]: ...

    @overload
    async def start(
        self,
        workflow: str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        deadline: datetime | timedelta | float | None = None,
        version: int | None = None,
        priority: int = 0,
        conn: Connection | None = None,
        fairness_key: str | None = None,
    ) -> RunHandle[Any]: ...

    async def start(
        self,
        workflow: WorkflowDefinition[Any, Any] | str,
        input: Any = None,
        *,
        idempotency_key: str | None = None,
        deadline: datetime | timedelta | float | None = None,
        version: int | None = None,
        priority: int = 0,
        conn: Connection | None = None,
        fairness_key: str | None = None,
    ) -> RunHandle[Any]:
        """Start a run of `workflow` (a definition or a registered name) and return its handle.

        With `conn`, the run is created inside the caller's transaction (it exists if and only
        if that transaction commits). `priority` (0-1000): among pending runs of the workflow,
        higher is claimed first, FIFO within a priority. `fairness_key`: the run's key under
        the workflow's `Fairness`, instead of the one read from the input.
        """
        return await self.workflows.start(
            workflow,
            input,
            idempotency_key=idempotency_key,
            deadline=deadline,
            version=version,
            priority=priority,
            conn=conn,
            fairness_key=fairness_key,
        )

    def handle(self, run_id: str) -> RunHandle[Any]:
        """A handle to an existing run (to await its result)."""
        return self.workflows.handle(run_id)

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or None if there is no such run."""
        return await self.workflows.get_run(run_id)

    async def list_steps(self, run_id: str) -> list[StepRecord]:
        """The run's journal in execution order, with timings."""
        return await self.workflows.list_steps(run_id)

    async def list_runs(
        self,
        workflow: str | None = None,
        status: str | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        parent_run_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        where: str | None = None,
    ) -> Page[Run]:
        """A page of runs, newest first; pass `page.next_cursor` for the next page. `where`
        searches attributes and run fields: `'customer = "acme" and amount > 100'`
        (docs/search.md)."""
        return await self.workflows.list_runs(
            workflow=workflow,
            status=status,
            since=since,
            until=until,
            parent_run_id=parent_run_id,
            limit=limit,
            cursor=cursor,
            where=where,
        )

    async def list_events(
        self,
        topic: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        where: dict[str, Any] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> EventPage:
        """Published events newest first in `[since, until)` (default: the last hour; at most
        31 days), of `topic`, whose payload contains `where` (`{"customerId": 42}`)."""
        return await self.events.list_events(topic, since, until, where, limit, cursor)

    async def cancel(self, run_id: str) -> bool:
        """Cancel a run (and its active children); True if it was still active."""
        return await self.workflows.cancel(run_id)

    async def verify(
        self,
        workflows: Sequence[WorkflowDefinition[Any, Any]],
        *,
        since: timedelta | float = timedelta(days=7),
        limit: int = 1000,
    ) -> VerifyReport:
        """Replay the recorded runs of each workflow's version (all active ones, completed and
        failed ones that ended within `since`, at most `limit` each) against this code: no step
        body runs and nothing is written. `report.ok` when no active run diverges."""
        from ripple.workflows.runtime.verify import verify_runs

        runs = await self.deploys.recorded_runs(workflows, since=since, limit=limit)
        return await verify_runs(runs, workflows)

    async def wake(self, run_id: str, step: str | None = None) -> bool:
        """Fire the run's pending sleeps and wait timeouts now (only `step` when given); True
        if anything fired. Raises NotFound."""
        return await self.deploys.wake(run_id, step)

    async def retry(self, run_id: str) -> RunHandle[Any]:
        """Resume a failed or canceled run in place (same id): steps with a recorded result keep
        it, the failed step runs again with a fresh attempt budget, compensations that ran are
        not undone. Raises NotFound, or Conflict for an active or completed run."""
        return await self.operations.retry(run_id)

    async def fork(self, run_id: str, from_step: str, input: Any = None) -> RunHandle[Any]:
        """A new run whose journal is `run_id`'s up to (not including) step `from_step`, on the
        newest version a worker serves; `input=None` keeps the original input. The new run
        records `forked_from`. Raises NotFound, or InvalidInput when the step is not in the
        journal."""
        return await self.operations.fork(run_id, from_step, input)

    async def cancel_many(
        self,
        workflow: str | None = None,
        status: str | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        created_before: datetime | None = None,
        dry_run: bool = False,
    ) -> int:
        """Cancel every active run matching the filters (in batches, safe while workers run);
        returns how many. `status` must be an active status (default: all of them).
        `dry_run`: only count the runs that match now."""
        from ripple.workflows.runs.operations import RunFilter

        return await self.operations.cancel_many(
            RunFilter(workflow, status, since, until, created_before), dry_run=dry_run
        )

    async def retry_many(
        self,
        workflow: str | None = None,
        status: str | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        created_before: datetime | None = None,
        dry_run: bool = False,
    ) -> int:
        """Retry every failed or canceled run matching the filters (in batches, safe while
        workers run); returns how many. `dry_run`: only count the runs that match now."""
        from ripple.workflows.runs.operations import RunFilter

        return await self.operations.retry_many(
            RunFilter(workflow, status, since, until, created_before), dry_run=dry_run
        )

    async def wait_run(self, run_id: str, timeout: timedelta | float) -> WaitOutcome:
        """The run once it ended, or as it is after `timeout` (`outcome.timed_out`)."""
        return await self.operations.wait(run_id, timeout)

    async def signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> SignalResult:
        """Deliver a signal to one run's wait `name`, or buffer it until such a wait exists.

        A repeat with the same `idempotency_key` (per run) returns the first result and is
        observed once.
        """
        return await self.workflows.signal(run_id, name, payload, idempotency_key=idempotency_key)

    async def signal_matching(
        self, event: str, payload: Any, *, idempotency_key: str | None = None
    ) -> int:
        """Resume every run waiting on `event` whose match `payload` contains; return how many.

        A repeat with the same `idempotency_key` (per event name) returns the first count and
        resumes nothing.
        """
        return await self.workflows.signal_matching(event, payload, idempotency_key=idempotency_key)

    # -- topics and subscriptions -----------------------------------------------------------

    async def publish(
        self,
        topic: str,
        payload: Any,
        idempotency_key: str | None = None,
        *,
        conn: Connection | None = None,
    ) -> PublishResult:
        """Publish an event and fan it out in one transaction (in `conn`'s, when given)."""
        return await self.publisher.publish(topic, payload, idempotency_key, conn=conn)

    async def explain(self, topic: str, payload: Any) -> Explanation:
        """Dry run: which subscriptions and waits would receive this event, and why not others."""
        return await self.publisher.explain(topic, payload)

    async def subscribe(
        self,
        pattern: str,
        target: QueueTarget | WebhookTarget | WorkflowTarget | Target,
        filter: dict[str, Any] | None = None,
        *,
        backfill_since: datetime | None = None,
    ) -> Subscription:
        """Subscribe `target` to topics matching `pattern` (`*` one segment, `#` any).

        With `backfill_since`, the retained events published since then that match are
        delivered first (returns once they are; progress is on the subscription), then it
        continues live: no event is missed or delivered twice at the boundary. A time older
        than the event retention raises InvalidInput.
        """
        sub = await self.subscriptions.subscribe(
            pattern, target.to_row(), filter, backfill_since=backfill_since
        )
        if backfill_since is None:
            return sub
        await self.backfills.run_backfill(sub.id)
        return await self.subscriptions.get(sub.id) or sub

    async def replay_events(
        self, subscription_id: str, since: datetime, until: datetime | None = None
    ) -> int:
        """Re-deliver the retained events created in [since, until) that match the subscription
        to it alone: same event ids, new deliveries. Returns how many. Raises NotFound, or
        InvalidInput when `since` is older than the event retention."""
        sub = await self.subscriptions.get(subscription_id)
        if sub is None:
            raise NotFound(f"no subscription {subscription_id!r}; list them with list()")
        return await self.backfills.replay(sub, since, until)

    async def unsubscribe(self, subscription_id: str) -> bool:
        """Delete a subscription; True if it existed."""
        return await self.subscriptions.unsubscribe(subscription_id)

    async def list_subscriptions(self) -> Sequence[Subscription]:
        """Every subscription, oldest first."""
        return await self.subscriptions.list()

    async def get_subscription(self, subscription_id: str) -> Subscription | None:
        """One subscription, or None."""
        return await self.subscriptions.get(subscription_id)

    async def pause_subscription(self, subscription_id: str) -> Subscription:
        """Stop delivering to a subscription until resumed (raises NotFound)."""
        return await self.subscriptions.pause(subscription_id)

    async def resume_subscription(self, subscription_id: str) -> Subscription:
        """Deliver again to a paused or disabled subscription (raises NotFound)."""
        return await self.subscriptions.resume(subscription_id)


def _resolve_settings(
    settings: Settings | None, database_url: str | None = None, redis_url: str | None = None
) -> Settings:
    """`settings` (default: the environment's) with the given URLs, else a running `ripple
    dev`'s when no database URL is configured."""
    base = settings or load_settings()
    updates: dict[str, Any] = {}
    if database_url is not None:
        updates["database_url"] = database_url
    if redis_url is not None:
        updates["redis_url"] = redis_url
    if base.database_url is None and "database_url" not in updates:
        found = discover_dev_urls()
        if found is not None:
            updates["database_url"] = found[0]
            if base.redis_url is None and redis_url is None:
                updates["redis_url"] = found[1]
    return base.model_copy(update=updates) if updates else base


class _Firing:
    """What a schedule's tick does, for `Schedules` (which knows neither workflows nor topics)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    async def start_run(
        self, conn: Connection, workflow: str, input: Any, idempotency_key: str
    ) -> str:
        handle = await self._client.start(
            workflow, input, idempotency_key=idempotency_key, conn=conn
        )
        return handle.run_id

    async def publish(
        self, conn: Connection, topic: str, payload: Any, idempotency_key: str
    ) -> None:
        await self._client.publish(topic, payload, idempotency_key, conn=conn)

    async def run_active(self, conn: Connection, run_id: str) -> bool:
        return await self._client.workflows.is_active(run_id, conn)

    async def check_payload(self, topic: str, payload: Any) -> None:
        await self._client.contracts.check(topic, payload)


class _ConnectedPool:
    """Stands for one of the client's pools before and after `connect()`: each use resolves the
    pool then (no await added), so a part used before `connect()` raises the client's clear
    "client is not connected" error instead of failing on a pool captured as None."""

    __slots__ = ("_resolve",)

    def __init__(self, resolve: Callable[[], Pool]) -> None:
        self._resolve = resolve

    # The calls the parts make per operation are spelled out: they skip `__getattr__`.
    def acquire(self, *, timeout: float | None = None) -> Any:
        return self._resolve().acquire(timeout=timeout)

    def fetch(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return self._resolve().fetch(query, *args, **kwargs)

    def fetchrow(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return self._resolve().fetchrow(query, *args, **kwargs)

    def fetchval(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return self._resolve().fetchval(query, *args, **kwargs)

    def execute(self, query: str, *args: Any, **kwargs: Any) -> Any:
        return self._resolve().execute(query, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resolve(), name)


class _ConnectedWaker:
    """Stands for the client's waker before and after `connect()` (a new waker is started on
    each connect): each hint or listen goes to the current one, without an await."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def notify(self, *hints: Any) -> None:
        # Hints only wake (Postgres holds every fact): one sent by a timer after `close()`,
        # such as the hint that follows a caller's commit, is dropped, as a closed waker would.
        waker = self._client._waker
        if waker is not None:
            waker.notify(*hints)

    def listen(self, channel: str) -> Any:
        return self._client.waker.listen(channel)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client.waker, name)
