"""Schedules: `Schedules` (what `client.schedules` is: create, pause, resume, trigger, delete,
list) and `Scheduler`, the background service that fires due ticks in every worker process.

Exactly one run or event per tick across processes: a scheduler locks due rows (`FOR UPDATE
SKIP LOCKED`), starts the run or publishes the event *in the same transaction* with the tick
time in its idempotency key, and advances the row; a second scheduler either skips the locked
row or sees it advanced, and even a replayed tick hits the idempotency key. After downtime only
the most recent missed tick fires. This module knows neither workflows nor subscribers: what a
firing does goes through the `Firing` port the composition root (`Client`) provides.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

from ripple.platform.access import audit_store
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool, map_errors, transaction
from ripple.platform.core.ids import new_id
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import CH_SCHEDULES, Listener, NullWaker, SchedulesChanged
from ripple.platform.errors import InvalidInput, NotFound, RippleError
from ripple.platform.events.topics import validate_topic
from ripple.platform.schedules import schedule_store as q
from ripple.platform.schedules.schedule_store import ScheduleInfo
from ripple.workflows.authoring.schedule import Schedule, latest_tick, next_tick

__all__ = ["Firing", "ScheduleInfo", "Scheduler", "Schedules"]

log = get_logger("ripple.schedules")

#: What a schedule name may be.
SCHEDULE_NAME: Final = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
#: Due schedules one scheduler transaction fires at most.
_BATCH = 20


class Firing(Protocol):
    """What firing a schedule does, inside the scheduler's transaction."""

    async def start_run(
        self, conn: Connection, workflow: str, input: Any, idempotency_key: str
    ) -> str:
        """Create the run (idempotent per key); return its id."""
        ...

    async def publish(
        self, conn: Connection, topic: str, payload: Any, idempotency_key: str
    ) -> None:
        """Publish the event (idempotent per key)."""
        ...

    async def run_active(self, conn: Connection, run_id: str) -> bool:
        """Whether the run is still pending, running, sleeping or waiting."""
        ...

    async def check_payload(self, topic: str, payload: Any) -> None:
        """Raise `InvalidInput` when `payload` does not fit `topic`'s schema."""
        ...


def check_schedule_name(name: Any) -> str:
    if not isinstance(name, str) or not SCHEDULE_NAME.fullmatch(name):
        raise InvalidInput(
            f"invalid schedule name {name!r}: use 1-128 characters of letters, digits, "
            "'_', '.', ':' and '-'",
            field="name",
        )
    return name


def _next(info: ScheduleInfo | Schedule, after: datetime) -> datetime:
    if isinstance(info, Schedule):
        return next_tick(
            after, cron=info.cron, every_seconds=info.every_seconds, timezone=info.timezone
        )
    return next_tick(
        after, cron=info.cron, every_seconds=info.every_seconds, timezone=info.timezone
    )


class Schedules:
    """Create and operate schedules (`client.schedules`)."""

    def __init__(self, pool: Pool, firing: Firing, waker: NullWaker | None = None) -> None:
        self._pool = pool
        self._firing = firing
        #: Schedulers listen on it: a change is noticed at once, not at the next poll.
        self.waker = waker or NullWaker()

    def _changed(self) -> None:
        self.waker.notify(SchedulesChanged())

    async def create(
        self,
        name: str,
        *,
        workflow: str | None = None,
        topic: str | None = None,
        cron: str | None = None,
        every: timedelta | float | None = None,
        timezone: str = "UTC",
        input: Any = None,
        payload: Any = None,
        overlap: str = "skip",
    ) -> ScheduleInfo:
        """Create (or replace) a schedule that starts `workflow` or publishes to `topic`.

        Exactly one of `cron` / `every`, and one of `workflow` / `topic`. `input` is each
        run's input; `payload` each event's payload (either name works for either target).
        Replacing keeps a paused schedule paused, and its next tick unless the cadence changed.
        """
        check_schedule_name(name)
        if (workflow is None) == (topic is None):
            raise InvalidInput("give a schedule exactly one of `workflow` or `topic`")
        if workflow is not None and (
            not isinstance(workflow, str) or not re.fullmatch(r"[a-z0-9_-]{1,64}", workflow)
        ):
            raise InvalidInput(f"invalid workflow name {workflow!r}", field="workflow")
        if topic is not None:
            validate_topic(topic)
        if input is not None and payload is not None:
            raise InvalidInput("give `input` or `payload`, not both", field="input")
        if topic is not None:
            # Refused now rather than at every tick (a tick that does not fit is skipped).
            value = payload if input is None else input
            await self._firing.check_payload(topic, {} if value is None else value)
        spec = Schedule(
            cron=cron,
            every=every,
            timezone=timezone,
            input=payload if input is None else input,
            overlap=overlap,  # type: ignore[arg-type]
        )
        return await self._upsert(name, workflow, topic, spec, "api")

    async def register_code(self, workflow: str, spec: Schedule) -> ScheduleInfo:
        """Store a schedule declared on `@workflow` (named after the workflow)."""
        return await self._upsert(workflow, workflow, None, spec, "code")

    async def _upsert(
        self, name: str, workflow: str | None, topic: str | None, spec: Schedule, source: str
    ) -> ScheduleInfo:
        async with transaction(self._pool) as conn:
            row = await conn.fetchrow(
                q.UPSERT_SCHEDULE,
                name,
                workflow,
                topic,
                spec.input,
                spec.cron,
                spec.every_seconds,
                spec.timezone,
                spec.overlap,
                source,
                _next(spec, datetime.now(UTC)),
            )
            if source == "api":  # a worker storing a schedule declared in code is no operator
                details: dict[str, Any] = {"workflow": workflow, "topic": topic, "cron": spec.cron}
                if spec.every_seconds is not None:
                    details["every_seconds"] = spec.every_seconds
                await audit_store.record(conn, "schedule.create", name, details)
        log.info("schedule_saved", schedule=name, source=source)
        self._changed()
        return ScheduleInfo.from_row(row)

    async def get(self, name: str) -> ScheduleInfo | None:
        """One schedule, or None."""
        with map_errors():
            row = await self._pool.fetchrow(q.SELECT_SCHEDULE, name)
        return None if row is None else ScheduleInfo.from_row(row)

    async def list(self) -> list[ScheduleInfo]:
        """Every schedule, by name."""
        with map_errors():
            rows = await self._pool.fetch(q.SELECT_SCHEDULES)
        return [ScheduleInfo.from_row(row) for row in rows]

    async def pause(self, name: str) -> ScheduleInfo:
        """Stop firing until resumed (raises NotFound)."""
        return await self._set_paused(name, True)

    async def resume(self, name: str) -> ScheduleInfo:
        """Fire again from the next tick on; ticks missed while paused do not fire."""
        return await self._set_paused(name, False)

    async def _set_paused(self, name: str, paused: bool) -> ScheduleInfo:
        async with transaction(self._pool) as conn:
            row = await conn.fetchrow(q.LOCK_SCHEDULE, name)
            if row is None:
                raise NotFound(f"no schedule {name!r}")
            info = ScheduleInfo.from_row(row)
            updated = await conn.fetchrow(q.SET_PAUSED, name, paused, _next(info, row["db_now"]))
            await audit_store.record(conn, "schedule.pause" if paused else "schedule.resume", name)
        self._changed()
        return ScheduleInfo.from_row(updated)

    async def delete(self, name: str) -> bool:
        """Delete a schedule; True if it existed. (A schedule declared in code comes back when
        a worker serving its workflow starts.)"""
        async with transaction(self._pool) as conn:
            deleted = await conn.fetchval(q.DELETE_SCHEDULE, name) is not None
            if deleted:
                await audit_store.record(conn, "schedule.delete", name)
        if deleted:
            self._changed()
        return deleted

    async def trigger(self, name: str) -> str | None:
        """Fire once now, outside the cadence (even when paused); returns the run id of a
        workflow schedule (None for a topic schedule)."""
        async with transaction(self._pool) as conn:
            row = await conn.fetchrow(q.LOCK_SCHEDULE, name)
            if row is None:
                raise NotFound(f"no schedule {name!r}")
            info = ScheduleInfo.from_row(row)
            run_id = await self._fire(conn, info, f"schedule:{name}:manual:{new_id()}")
            if run_id is not None:
                await conn.execute(q.SET_LAST_RUN, name, run_id)
            await audit_store.record(conn, "schedule.trigger", name, {"run_id": run_id})
        return run_id

    async def _fire(self, conn: Connection, info: ScheduleInfo, key: str) -> str | None:
        if info.workflow is not None:
            return await self._firing.start_run(conn, info.workflow, info.input, key)
        assert info.topic is not None
        # A topic schedule created without a payload publishes `{}`, the payload of no data.
        payload = {} if info.input is None else info.input
        await self._firing.publish(conn, info.topic, payload, key)
        return None

    async def fire_due(self) -> int:
        """Fire the latest due tick of every due schedule no other scheduler holds (at most a
        batch); returns how many schedules it handled (fired, or skipped for overlap)."""
        async with transaction(self._pool) as conn:
            rows = await conn.fetch(q.LOCK_DUE_SCHEDULES, _BATCH)
            for row in rows:
                info = ScheduleInfo.from_row(row)
                now: datetime = row["db_now"]
                tick = latest_tick(
                    info.next_run_at,
                    now,
                    cron=info.cron,
                    every_seconds=info.every_seconds,
                    timezone=info.timezone,
                )
                run_id = None
                skip = (
                    info.workflow is not None
                    and info.overlap == "skip"
                    and info.last_run_id is not None
                    and await self._firing.run_active(conn, info.last_run_id)
                )
                if skip:
                    log.info("schedule_tick_skipped", schedule=info.name, tick=tick.isoformat())
                else:
                    key = f"schedule:{info.name}:{tick.astimezone(UTC).isoformat()}"
                    try:  # in a savepoint: one bad schedule must not hold back the others
                        async with transaction(self._pool, conn) as savepoint:
                            run_id = await self._fire(savepoint, info, key)
                    except RippleError as exc:
                        log.warning("schedule_fire_failed", schedule=info.name, error=str(exc))
                await conn.execute(q.ADVANCE_SCHEDULE, info.name, _next(info, now), tick, run_id)
        return len(rows)

    async def seconds_until_due(self) -> float | None:
        """Seconds until the next schedule is due (None: no active schedule)."""
        with map_errors():
            value: float | None = await self._pool.fetchval(q.NEXT_SCHEDULE_DUE)
        return value


class Scheduler:
    """Background service: fires due schedules, sleeping exactly until the next one is due.

    Args:
        schedules: the schedules service.
        settings: `poll_interval` (the longest sleep; a schedule saved anywhere wakes it
            through the `schedules` hint, or within the poll when hints are lost).
        prepare: run once at start (the client registers code schedules and flow controls of
            the workflows this process serves).
    """

    name = "scheduler"

    def __init__(
        self,
        schedules: Schedules,
        settings: Settings,
        prepare: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._schedules = schedules
        self._settings = settings
        self._prepare = prepare
        self._stopping = False
        self._listener: Listener | None = None

    def stop(self) -> None:
        self._stopping = True
        if self._listener is not None:
            self._listener.poke()  # ends the current sleep

    async def run(self) -> None:
        if self._prepare is not None:
            try:
                await self._prepare()
            except RippleError as exc:
                log.warning("scheduler_prepare_failed", error=str(exc))
        poll = self._settings.poll_interval
        # Listening before the first read: a schedule saved after it wakes the loop at once
        # (without Redis, or for a missed hint, the poll still notices it).
        async with self._schedules.waker.listen(CH_SCHEDULES) as listener:
            self._listener = listener
            while not self._stopping:
                wait = await self._tick(poll)
                if wait > 0 and not self._stopping:
                    await listener.wait(wait)  # a hint, `stop()` or the time: look again

    async def _tick(self, poll: float) -> float:
        """Fire what is due; seconds until the next look (0: at once, more may be due)."""
        try:
            if await self._schedules.fire_due() == _BATCH:
                return 0.0  # more may be due
            due = await self._schedules.seconds_until_due()
        except RippleError as exc:
            log.warning("scheduler_failed", error=str(exc))
            return poll
        # (negative: another scheduler holds it right now)
        return poll if due is None else min(poll, max(0.005, due))
