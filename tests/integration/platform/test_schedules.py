"""Schedules: one run per tick across workers, topic schedules, operations, catch-up
after downtime, overlap. Time is moved by updating `next_run_at` in SQL, not by sleeping."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.errors import InvalidInput, NotFound
from ripple.subscribers import QueueTarget
from ripple.workflows import Schedule, Worker, WorkflowContext, workflow
from tests.helpers import assert_eventually


@workflow(name="ticker", schedule=Schedule(every=1, input={"from": "code"}))
async def ticker(ctx: WorkflowContext, inp: dict[str, Any]) -> str:
    return str(inp["from"])


@workflow(name="report")
async def report(ctx: WorkflowContext, inp: dict[str, Any] | None) -> Any:
    return inp


@workflow(name="hourly", schedule=Schedule(every=3600))
async def hourly(ctx: WorkflowContext) -> None:
    return None


@workflow(name="held")
async def held(ctx: WorkflowContext) -> Any:
    return await ctx.step.wait_for_event("go", event="held.go")


def _tick(key: str | None) -> datetime:
    assert key is not None
    assert key.startswith("schedule:ticker:")
    return datetime.fromisoformat(key.removeprefix("schedule:ticker:"))


async def _ticks(client: Client) -> list[datetime]:
    page = await client.list_runs(workflow="ticker", limit=100)
    return sorted(_tick(r.idempotency_key) for r in page.items)


async def _db_now(client: Client) -> datetime:
    value: datetime = await client.pool.fetchval("SELECT clock_timestamp()")
    return value


async def _make_due(client: Client, name: str, ago: timedelta = timedelta(0)) -> None:
    await client.pool.execute(
        "UPDATE ripple_schedules SET next_run_at = now() - $2::interval WHERE name = $1",
        name,
        ago,
    )


async def test_schedules__every_second_with_two_workers_one_run_per_tick(
    client: Client, settings: Settings
) -> None:
    async with Client(settings=settings) as other:
        began = await _db_now(client)
        async with (
            Worker(client, [ticker], webhooks=False, sweeper=False),
            Worker(other, [ticker], webhooks=False, sweeper=False),
        ):

            async def five() -> bool:
                return len(await _ticks(client)) >= 5

            await assert_eventually(five, timeout=20)
        ended = await _db_now(client)
    ticks = await _ticks(client)
    assert len(ticks) == len(set(ticks))  # never two runs for one tick
    assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(ticks))
    window = (ended - began).total_seconds()
    assert window - 1 <= len(ticks) <= window + 1
    schedules = await client.schedules.list()
    assert [(s.name, s.source, s.workflow) for s in schedules] == [("ticker", "code", "ticker")]


async def test_schedules__survive_a_worker_restart(client: Client, settings: Settings) -> None:
    async with Worker(client, [ticker], webhooks=False, sweeper=False):

        async def two() -> bool:
            return len(await _ticks(client)) >= 2

        await assert_eventually(two, timeout=20)
    before = await _ticks(client)
    async with (
        Client(settings=settings) as fresh,
        Worker(fresh, [ticker], webhooks=False, sweeper=False),
    ):

        async def more() -> bool:
            return len(await _ticks(client)) >= len(before) + 2

        await assert_eventually(more, timeout=20)
    after = await _ticks(client)
    assert after[: len(before)] == before
    assert len(after) == len(set(after))
    assert all(t > before[-1] for t in after[len(before) :])


async def test_schedules__a_topic_schedule_delivers_to_a_queue(client: Client) -> None:
    await client.subscribe("clock.tick", QueueTarget("ticks"))
    created = await client.schedules.create(
        "clock", topic="clock.tick", every=timedelta(seconds=1), payload={"source": "clock"}
    )
    assert created.topic == "clock.tick"
    async with Worker(client, [report], webhooks=False, sweeper=False):
        messages = await assert_eventually(
            lambda: client.queues.receive("ticks", max_messages=1, wait=1), timeout=15
        )
    assert messages[0].body == {"source": "clock"}
    assert messages[0].headers["topic"] == "clock.tick"


async def test_schedules__a_topic_schedule_without_a_payload_publishes_an_empty_object(
    client: Client,
) -> None:
    await client.subscribe("clock.bare", QueueTarget("bare-ticks"))
    await client.schedules.create("bare", topic="clock.bare", every=timedelta(days=1))
    assert await client.schedules.trigger("bare") is None
    (message,) = await client.queues.receive("bare-ticks", max_messages=1)
    assert message.body == {}


async def test_schedules__pause_resume_trigger_delete(client: Client) -> None:
    info = await client.schedules.create(
        "nightly",
        workflow="report",
        cron="0 3 * * *",
        timezone="Europe/Berlin",
        input={"a": 1},
        overlap="allow",
    )
    assert info.next_run_at > datetime.now(UTC)
    run_id = await client.schedules.trigger("nightly")
    assert run_id is not None
    run = await client.get_run(run_id)
    assert run is not None
    assert run.input == {"a": 1}

    paused = await client.schedules.pause("nightly")
    assert paused.paused
    await _make_due(client, "nightly")
    assert await client.schedules.fire_due() == 0  # paused: nothing fires
    resumed = await client.schedules.resume("nightly")
    assert not resumed.paused
    assert resumed.next_run_at > datetime.now(UTC)  # the tick missed while paused is dropped

    await _make_due(client, "nightly")
    assert await client.schedules.fire_due() == 1
    page = await client.list_runs(workflow="report")
    assert len(page.items) == 2

    assert await client.schedules.delete("nightly")
    assert not await client.schedules.delete("nightly")
    assert await client.schedules.list() == []
    with pytest.raises(NotFound):
        await client.schedules.trigger("nightly")
    with pytest.raises(NotFound):
        await client.schedules.pause("nightly")


async def test_schedules__after_downtime_only_the_latest_missed_tick_fires(
    client: Client,
) -> None:
    await client.schedules.create("minutely", workflow="report", every=60)
    await _make_due(client, "minutely", timedelta(hours=3))
    assert await client.schedules.fire_due() == 1
    page = await client.list_runs(workflow="report")
    assert len(page.items) == 1
    info = await client.schedules.get("minutely")
    assert info is not None
    assert info.next_run_at > datetime.now(UTC)
    assert info.last_tick_at is not None
    assert datetime.now(UTC) - info.last_tick_at < timedelta(seconds=61)


async def test_schedules__overlap_skip_waits_for_the_previous_run(client: Client) -> None:
    await client.schedules.create("busy", workflow="held", every=60, overlap="skip")
    async with Worker(client, [held], webhooks=False, sweeper=False):
        await _make_due(client, "busy")
        await client.schedules.fire_due()
        await _make_due(client, "busy")
        await client.schedules.fire_due()  # the first run still waits: skipped
        page = await client.list_runs(workflow="held")
        assert len(page.items) == 1
        await client.schedules.create("busy", workflow="held", every=60, overlap="allow")
        await _make_due(client, "busy")
        await client.schedules.fire_due()

        # The worker's own scheduler may hold the due tick (its row lock makes this
        # fire_due skip it) and commit the run a moment later.
        async def two_runs() -> bool:
            return len((await client.list_runs(workflow="held")).items) == 2

        await assert_eventually(two_runs)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"workflow": "report"},
        {"workflow": "report", "topic": "a.b", "every": 1},
        {"every": 1},
        {"workflow": "report", "cron": "* * *"},
        {"workflow": "report", "every": 1, "timezone": "Nowhere/Else"},
        {"workflow": "report", "every": -1},
        {"workflow": "Not A Name", "every": 1},
    ],
)
async def test_schedules__bad_input_writes_nothing(client: Client, kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidInput):
        await client.schedules.create("bad", **kwargs)
    assert await client.schedules.list() == []


async def test_schedules__a_new_schedule_wakes_a_sleeping_scheduler(
    client: Client, settings: Settings
) -> None:
    """A schedule saved through another client fires at its first tick, not after the
    scheduler's next poll: saving one sends a wake hint. With a 30 s poll only the hint can
    make the first run appear within the 10 s this test waits."""
    slow = settings.model_copy(update={"poll_interval": 30.0})
    async with (
        Client(settings=slow) as worker_side,
        Worker(worker_side, [report, hourly], webhooks=False, sweeper=False),
    ):
        # The scheduler registers `hourly` at start, then sleeps (at most the 30 s poll).
        await assert_eventually(lambda: client.schedules.get("hourly"))
        await client.schedules.create("soon", workflow="report", every=1)

        async def fired() -> bool:
            return len((await client.list_runs(workflow="report")).items) >= 1

        await assert_eventually(fired, timeout=10)


async def test_schedules__an_interval_too_short_to_count_ticks_is_refused(client: Client) -> None:
    with pytest.raises(InvalidInput, match="every"):
        Schedule(every=5e-324)
    with pytest.raises(InvalidInput, match="every"):
        await client.schedules.create("tiny", workflow="report", every=5e-324)
    assert await client.schedules.list() == []
