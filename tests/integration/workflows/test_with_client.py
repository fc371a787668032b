"""The workflow runtime composed by the platform `Client`: start, worker, topic fan-out to a
workflow, and a topic publish resolving an event wait inside the publish transaction."""

from __future__ import annotations

from typing import Any

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.subscribers import WorkflowTarget
from ripple.workflows import Debounce, RunStatus, Worker, WorkflowContext, workflow
from tests.helpers import assert_eventually


@workflow(name="greet")
async def greet(ctx: WorkflowContext, inp: dict[str, Any]) -> str:
    return str(await ctx.step.run("hello", lambda: f"hello {inp['userId']}"))


@workflow(name="verify-user")
async def verify_user(ctx: WorkflowContext, user: int) -> Any:
    return await ctx.step.wait_for_event(
        "verified", event="user.verified", match={"userId": user}, timeout=60
    )


async def test_client__start_and_result_through_the_platform_client(client: Client) -> None:
    async with Worker(client, [greet], webhooks=False, sweeper=False):
        handle = await client.start(greet, {"userId": 1})
        assert await handle.result(timeout=10) == "hello 1"


async def test_client__topic_fan_out_starts_a_run(client: Client) -> None:
    await client.subscribe("user.*", WorkflowTarget("greet"))
    async with Worker(client, [greet], webhooks=False, sweeper=False):
        await client.publish("user.signup", {"userId": 42})

        async def completed() -> list[Any]:
            page = await client.list_runs(workflow="greet", status="completed")
            return [r.output for r in page.items]

        assert await assert_eventually(completed) == ["hello 42"]


async def test_client__publish_resolves_matching_event_waits(client: Client) -> None:
    async with Worker(client, [verify_user], webhooks=False, sweeper=False):
        a = await client.start(verify_user, 1)
        b = await client.start(verify_user, 2)

        async def waiting() -> bool:
            runs = [await client.get_run(h.run_id) for h in (a, b)]
            return all(r is not None and r.status == RunStatus.WAITING for r in runs)

        await assert_eventually(waiting)
        await client.publish("user.verified", {"userId": 2, "via": "email"})
        assert await b.result(timeout=10) == {"userId": 2, "via": "email"}
        run = await client.get_run(a.run_id)
        assert run is not None
        assert run.status == RunStatus.WAITING


async def test_client__start_in_callers_transaction_wakes_worker_after_commit(
    settings: Settings,
) -> None:
    # A 60 s poll interval and lease (the worker also wakes when an in-flight run's lease would
    # expire): only a hint sent after the caller's commit gets this run picked up in time.
    slow_poll = settings.model_copy(update={"poll_interval": 60.0, "lease_seconds": 60.0})
    async with (
        Client(settings=slow_poll) as starter,
        Client(settings=slow_poll) as host,
        Worker(host, [greet], webhooks=False, sweeper=False),
    ):
        # A first run proves both processes' wake layers are connected and the worker is idle.
        assert await (await starter.start(greet, {"userId": 6})).result(timeout=10) == "hello 6"
        async with starter.pool.acquire() as conn, conn.transaction():
            handle = await starter.start(greet, {"userId": 7}, conn=conn)
        assert await handle.result(timeout=10) == "hello 7"


@workflow(name="profile-sync", debounce=Debounce(period=0.3, key="userId"))
async def profile_sync(ctx: WorkflowContext, inp: dict[str, Any]) -> Any:
    return inp


async def test_client__debounce_collapses_subscription_starts(client: Client) -> None:
    client.workflows.register(profile_sync)
    await client.subscribe("profile.*", WorkflowTarget("profile-sync"))
    for i in range(5):
        await client.publish("profile.updated", {"userId": 7, "v": i})
    await client.publish("profile.updated", {"userId": 8, "v": 0})
    async with Worker(client, [profile_sync], webhooks=False, sweeper=False):

        async def completed() -> list[Any]:
            page = await client.list_runs(workflow="profile-sync", status="completed")
            done = sorted((r.output["userId"], r.output["v"]) for r in page.items)
            return done if len(done) == 2 else []

        assert await assert_eventually(completed) == [(7, 4), (8, 0)]
    page = await client.list_runs(workflow="profile-sync")
    assert len(page.items) == 2
