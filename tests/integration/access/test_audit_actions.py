"""Every audited operator action writes one audit row in its own transaction: actor, target and
details; an action that fails writes none, and an audit insert that fails undoes the action."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ripple.platform.access.audit import AuditEntry
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.ids import new_id
from ripple.platform.errors import Conflict, InvalidInput, NotFound, StorageError
from ripple.platform.events import backfill
from ripple.subscribers import QueueTarget, WebhookTarget
from ripple.workflows import RunStatus, Worker, WorkflowContext, workflow
from ripple.workflows.runs import operations
from tests.helpers import assert_eventually


@workflow(name="audited")
async def audited(ctx: WorkflowContext, inp: dict[str, Any]) -> Any:
    await ctx.step.run("prep", lambda: inp["i"])
    return await ctx.step.wait_for_event("go", event="audited.go", timeout=3600)


async def entries(client: Client, action: str | None = None) -> list[AuditEntry]:
    return (await client.audit.list(action=action)).items


async def only(client: Client, action: str) -> AuditEntry:
    """The one entry of `action`, written by the in-process client outside any request."""
    (entry,) = await entries(client, action)
    assert entry.actor == "python"
    assert entry.request_id is None
    return entry


async def _status(client: Client, run_id: str) -> RunStatus:
    run = await client.get_run(run_id)
    assert run is not None
    return run.status


async def _is(client: Client, run_id: str, status: RunStatus) -> bool:
    return await _status(client, run_id) == status


async def test_audit__run_actions_record_actor_target_and_details(client: Client) -> None:
    async with Worker(client, [audited], webhooks=False, sweeper=False):
        a = await client.start(audited, {"i": 1})
        b = await client.start(audited, {"i": 2})
        for handle in (a, b):
            await assert_eventually(
                functools.partial(_is, client, handle.run_id, RunStatus.WAITING), timeout=20
            )
    assert await entries(client) == []  # starting runs is the data path, not audited

    await client.signal(a.run_id, "nudge", {"x": 1})
    forked = await client.fork(a.run_id, "prep")
    assert await client.cancel(a.run_id)
    await client.retry(a.run_id)
    assert await client.cancel_many(workflow="audited", dry_run=True) == 3  # changes nothing
    assert await client.cancel_many(workflow="audited") == 3
    assert await client.retry_many(workflow="audited", status="canceled") == 3

    signal = await only(client, "run.signal")
    assert (signal.target, signal.details) == (a.run_id, {"name": "nudge", "delivered": False})
    fork = await only(client, "run.fork")
    assert (fork.target, fork.details) == (
        a.run_id,
        {"from_step": "prep", "new_run_id": forked.run_id},
    )
    cancel = await only(client, "run.cancel")
    assert (cancel.target, cancel.details) == (a.run_id, {"canceled": 1})
    retry = await only(client, "run.retry")
    assert (retry.target, retry.details) == (a.run_id, {})
    bulk_cancel = await only(client, "runs.cancel_many")
    assert bulk_cancel.target is None
    assert bulk_cancel.details == {"filter": {"workflow": "audited"}, "count": 3}
    bulk_retry = await only(client, "runs.retry_many")
    assert bulk_retry.details == {
        "filter": {"workflow": "audited", "status": "canceled"},
        "count": 3,
    }
    # Newest first.
    assert [e.action for e in await entries(client)] == [
        "runs.retry_many",
        "runs.cancel_many",
        "run.retry",
        "run.cancel",
        "run.fork",
        "run.signal",
    ]
    await client.cancel_many(workflow="audited")


async def test_audit__a_cancel_that_changes_nothing_writes_no_second_row(client: Client) -> None:
    run = await client.start("audit-once", {})
    assert await client.cancel(run.run_id)
    assert not await client.cancel(run.run_id)
    entry = await only(client, "run.cancel")
    assert (entry.target, entry.details) == (run.run_id, {"canceled": 1})


async def test_audit__bulk_action_over_several_batches_keeps_one_row_with_the_total(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(operations, "BULK_BATCH", 2)
    since = datetime.now(UTC) - timedelta(minutes=5)
    for i in range(5):
        await client.start("audit-bulk", {"i": i})
    assert await client.cancel_many(workflow="audit-bulk", since=since) == 5
    entry = await only(client, "runs.cancel_many")
    assert entry.details == {
        "filter": {"workflow": "audit-bulk", "since": since.isoformat()},
        "count": 5,
    }
    # Nothing matched: still one row, counting zero.
    assert await client.cancel_many(workflow="audit-bulk") == 0
    counts = [e.details["count"] for e in await entries(client, "runs.cancel_many")]
    assert counts == [0, 5]


async def test_audit__subscription_actions(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = await client.subscribe("order.*", QueueTarget("audit-q"))
    for n in range(2):
        await client.publish("order.created", {"n": n})
    await client.pause_subscription(sub.id)
    await client.resume_subscription(sub.id)
    monkeypatch.setattr(backfill, "BATCH", 1)  # a replay of two batches keeps one row
    since = datetime.now(UTC) - timedelta(hours=1)
    assert await client.replay_events(sub.id, since) == 2
    assert await client.unsubscribe(sub.id)

    created = await only(client, "subscription.create")
    assert (created.target, created.details) == (sub.id, {"pattern": "order.*", "kind": "queue"})
    assert (await only(client, "subscription.pause")).target == sub.id
    assert (await only(client, "subscription.resume")).target == sub.id
    assert (await only(client, "subscription.delete")).target == sub.id
    replay = await only(client, "subscription.replay")
    assert replay.target == sub.id
    assert replay.details["count"] == 2
    assert replay.details["since"] == since.isoformat()


async def test_audit__subscribing_with_a_backfill_records_the_backfill(client: Client) -> None:
    await client.publish("ledger.entry", {"n": 1})
    since = datetime.now(UTC) - timedelta(hours=1)
    sub = await client.subscribe("ledger.*", QueueTarget("audit-ledger"), backfill_since=since)
    created = await only(client, "subscription.create")
    assert created.details["backfill_since"] == since.isoformat()
    replay = await only(client, "subscription.replay")
    assert (replay.target, replay.details) == (
        sub.id,
        {"backfill": True, "since": since.isoformat()},
    )


async def test_audit__schedule_actions(client: Client) -> None:
    await client.schedules.create("nightly", topic="audit.tick", every=3600)
    await client.schedules.pause("nightly")
    await client.schedules.resume("nightly")
    assert await client.schedules.trigger("nightly") is None
    await client.schedules.create("hourly", workflow="audit-report", every=3600)
    run_id = await client.schedules.trigger("hourly")
    assert run_id is not None
    assert await client.schedules.delete("nightly")

    created = await entries(client, "schedule.create")
    assert [(e.target, e.details["topic"], e.details["workflow"]) for e in created] == [
        ("hourly", None, "audit-report"),
        ("nightly", "audit.tick", None),
    ]
    assert created[1].details["every_seconds"] == 3600
    assert (await only(client, "schedule.pause")).target == "nightly"
    assert (await only(client, "schedule.resume")).target == "nightly"
    assert (await only(client, "schedule.delete")).target == "nightly"
    triggers = await entries(client, "schedule.trigger")
    assert [(e.target, e.details) for e in triggers] == [
        ("hourly", {"run_id": run_id}),
        ("nightly", {"run_id": None}),
    ]


@pytest.fixture
async def hooked(settings: Settings) -> AsyncIterator[Client]:
    """A client admitting loopback webhooks (nothing listens: deliveries stay pending)."""
    local = settings.model_copy(update={"webhook_allowed_networks": ["127.0.0.0/8"]})
    async with Client(settings=local) as client:
        yield client


async def _fail_all(client: Client) -> None:
    # The dispatcher does not run here: the deliveries are made failed as it would leave them.
    await client.pool.execute(
        "UPDATE ripple_webhook_deliveries SET status = 'failed', next_attempt_at = NULL"
    )


async def test_audit__delivery_redrive_one_and_every_failed(hooked: Client) -> None:
    sub = await hooked.subscribe("pay.*", WebhookTarget("http://127.0.0.1:9/hook"))
    await hooked.publish("pay.done", {"n": 1})
    await _fail_all(hooked)
    (delivery,) = (await hooked.deliveries.list(status="failed")).items
    await hooked.deliveries.redrive(delivery.id)
    await _fail_all(hooked)
    assert await hooked.deliveries.redrive_failed(subscription_id=sub.id) == 1

    bulk, one = await entries(hooked, "delivery.redrive")
    assert (one.target, one.details, one.actor) == (delivery.id, {}, "python")
    assert bulk.target is None
    assert bulk.details == {"filter": {"subscription_id": sub.id}, "count": 1}


async def test_audit__actions_that_fail_write_no_row(client: Client) -> None:
    pending = await client.start("audit-refused", {})
    done = await client.start("audit-refused", {"n": 2})
    assert await client.cancel(done.run_id)
    audited_now = len(await entries(client))

    with pytest.raises(NotFound):
        await client.cancel(new_id())
    with pytest.raises(Conflict):
        await client.retry(pending.run_id)
    with pytest.raises(NotFound):
        await client.retry(new_id())
    with pytest.raises(NotFound):
        await client.fork(new_id(), "a")
    with pytest.raises(Conflict):
        await client.signal(done.run_id, "late")
    with pytest.raises(InvalidInput):
        await client.cancel_many(status="completed")
    with pytest.raises(NotFound):
        await client.pause_subscription(new_id())
    with pytest.raises(NotFound):
        await client.resume_subscription(new_id())
    assert not await client.unsubscribe(new_id())
    with pytest.raises(NotFound):
        await client.replay_events(new_id(), datetime.now(UTC))
    with pytest.raises(InvalidInput):
        await client.subscribe("bad..pattern", QueueTarget("q"))
    with pytest.raises(NotFound):
        await client.schedules.pause("nope")
    with pytest.raises(NotFound):
        await client.schedules.trigger("nope")
    with pytest.raises(InvalidInput):
        await client.schedules.create("bad", topic="a.b")  # no cadence
    assert not await client.schedules.delete("nope")
    with pytest.raises(NotFound):
        await client.deliveries.redrive(new_id())

    assert len(await entries(client)) == audited_now == 1


@pytest.fixture
async def refusing(client: Client) -> Client:
    """The test database refuses every audit insert (a fault in the audit write)."""
    await client.pool.execute(
        """
        CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'audit insert refused by the test'; END $$;
        CREATE TRIGGER refuse_audit BEFORE INSERT ON ripple_audit
            FOR EACH ROW EXECUTE FUNCTION refuse_audit();
        """
    )
    return client


async def test_audit__a_failing_audit_insert_rolls_the_action_back(refusing: Client) -> None:
    client = refusing
    run = await client.start("audit-fault", {})
    with pytest.raises(StorageError, match="audit insert refused"):
        await client.cancel(run.run_id)
    assert await _status(client, run.run_id) == RunStatus.PENDING
    with pytest.raises(StorageError):
        await client.cancel_many(workflow="audit-fault")
    assert await _status(client, run.run_id) == RunStatus.PENDING

    with pytest.raises(StorageError):
        await client.subscribe("fault.*", QueueTarget("fault-q"))
    assert await client.list_subscriptions() == []

    with pytest.raises(StorageError):
        await client.schedules.create("fault", topic="fault.tick", every=3600)
    assert await client.schedules.list() == []

    await client.pool.execute("ALTER TABLE ripple_audit DISABLE TRIGGER refuse_audit")
    await client.schedules.create("kept", topic="fault.tick", every=3600)
    await client.pool.execute("ALTER TABLE ripple_audit ENABLE TRIGGER refuse_audit")
    with pytest.raises(StorageError):
        await client.schedules.pause("kept")
    with pytest.raises(StorageError):
        await client.schedules.delete("kept")
    (kept,) = await client.schedules.list()
    assert (kept.name, kept.paused) == ("kept", False)
    assert [e.action for e in await entries(client)] == ["schedule.create"]
