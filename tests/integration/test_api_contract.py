"""API.md, literally: every name and call of the public contract as the document writes it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import httpx
import pytest
from pydantic import BaseModel

from ripple.platform.api.app import create_app
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.subscribers import QueueTarget, WebhookTarget, WorkflowTarget
from ripple.workflows import (
    NonDeterminismError,
    NonRetriableError,
    RetryAfterError,
    RetryPolicy,
    RollbackError,
    Worker,
    WorkflowCanceled,
    WorkflowContext,
    WorkflowFailed,
    workflow,
)
from tests.helpers import assert_eventually


class OrderIn(BaseModel):
    id: int


class OrderOut(BaseModel):
    id: int
    total: float


@dataclass
class Signup:
    userId: int


def price(order_id: int) -> float:
    return order_id * 1.5


@workflow(name="order", version=1, retry=None, retention=timedelta(days=30), deadline=None)
async def order(ctx: WorkflowContext, inp: OrderIn) -> OrderOut:
    total = await ctx.step.run("price", price, inp.id)
    await ctx.step.sleep("pause", 0.01)
    approval = await ctx.step.wait_for_event("approved", match={"ok": True}, timeout=30)
    assert approval is not None
    return OrderOut(id=inp.id, total=total)


@workflow(name="onboard-user")
async def onboard_user(ctx: WorkflowContext, inp: Signup) -> int:
    verified = await ctx.step.wait_for_event(
        "verify", event="user.verified", match={"userId": inp.userId}, timeout=60
    )
    assert verified is not None
    return inp.userId


def boom() -> None:
    raise NonRetriableError("no")


@workflow(name="fails")
async def fails(ctx: WorkflowContext) -> None:
    await ctx.step.run("boom", boom, retry=RetryPolicy(max_attempts=5))


@workflow(name="ctx-info")
async def ctx_info(ctx: WorkflowContext, inp: dict[str, int]) -> dict[str, object]:
    return {
        "run_id": ctx.run_id,
        "workflow": ctx.workflow_name,
        "version": ctx.version,
        "input": ctx.input,
        "uuid": str(ctx.uuid()),
        "random": ctx.random(),
        "now": ctx.now().isoformat(),
    }


@workflow(name="parent-of")
async def parent_of(ctx: WorkflowContext) -> float:
    out = await ctx.step.run_workflow(ctx_info, {"a": 1}, name="kid", timeout=30)
    return float(out["random"])


def test_contract__errors_and_policy_are_the_documented_types() -> None:
    policy = RetryPolicy(
        max_attempts=3,
        initial_interval=1.0,
        backoff_coefficient=2.0,
        max_interval=60.0,
        jitter=0.2,
        non_retryable=(),
    )
    assert policy.max_attempts == 3
    assert RetryPolicy(max_attempts=0).allows(10_000)
    assert issubclass(RetryAfterError, Exception)
    assert RetryAfterError("later", 5).delay in (5, 5.0, timedelta(seconds=5))
    assert issubclass(RollbackError, Exception)
    for exc in (WorkflowFailed, WorkflowCanceled, NonDeterminismError):
        assert issubclass(exc, Exception)


async def test_contract__client_and_worker_as_documented(settings: Settings) -> None:
    async with Client(database_url=settings.database_url, redis_url=settings.redis_url) as client:
        worker = Worker(
            client,
            [order, onboard_user, fails, ctx_info, parent_of],
            concurrency=100,
            webhooks=True,
            sweeper=True,
        )
        async with worker:
            handle = await client.start(
                order, OrderIn(id=2), idempotency_key=None, deadline=None, version=None
            )
            again = await client.start("order", {"id": 1}, idempotency_key="k1")
            same = await client.start("order", {"id": 1}, idempotency_key="k1")
            assert same.run_id == again.run_id

            async def waiting(run_id: str) -> bool:
                run = await client.get_run(run_id)
                return run is not None and run.status == "waiting"

            await assert_eventually(lambda: waiting(handle.run_id), timeout=20)
            res = await client.signal(handle.run_id, "approved", {"ok": True, "by": "ann"})
            assert res.delivered
            assert not res.buffered
            out = await handle.result(timeout=30)
            assert out == OrderOut(id=2, total=3.0)

            run = await client.get_run(handle.run_id)
            assert run is not None
            for field in (
                "run_id",
                "workflow",
                "version",
                "status",
                "input",
                "output",
                "error",
                "attempt",
                "created_at",
                "started_at",
                "completed_at",
                "parent_run_id",
            ):
                assert hasattr(run, field), field
            assert (run.workflow, run.version, run.status) == ("order", 1, "completed")
            steps = await client.list_steps(handle.run_id)
            assert [s.key for s in steps] == ["price", "pause", "approved"]
            for field in (
                "key",
                "kind",
                "status",
                "attempts",
                "output",
                "error",
                "started_at",
                "completed_at",
            ):
                assert hasattr(steps[0], field), field

            page = await client.list_runs(
                workflow="order", status="completed", limit=50, cursor=None
            )
            assert [r.run_id for r in page.items] == [handle.run_id]
            assert page.next_cursor is None

            with pytest.raises(WorkflowFailed):
                await (await client.start(fails)).result(timeout=30)

            pending = await client.start("order", {"id": 9})
            await assert_eventually(lambda: waiting(pending.run_id), timeout=20)
            assert await client.cancel(pending.run_id) is True
            assert await client.cancel(pending.run_id) is False
            with pytest.raises(WorkflowCanceled):
                await pending.result(timeout=10)

            info = await (await client.start(ctx_info, {"a": 1})).result(timeout=30)
            assert info["workflow"] == "ctx-info"
            assert info["input"] == {"a": 1}
            parent = await client.start(parent_of)
            assert isinstance(await parent.result(timeout=30), float)
            children = await client.list_runs(parent_run_id=parent.run_id)
            assert len(children.items) == 1
            assert children.items[0].parent_run_id == parent.run_id

            sub = await client.subscribe("user.*", WorkflowTarget("onboard-user"), filter=None)
            await client.subscribe("#", QueueTarget("audit"))
            hook = await client.subscribe(
                "billing.#",
                WebhookTarget(
                    "https://example.com/hook",
                    secret="whsec_" + "A" * 32,
                    retry=RetryPolicy(max_attempts=8),
                    timeout=10.0,
                ),
            )
            ev = await client.publish("user.signup", {"userId": 42}, idempotency_key=None)
            assert ev.event_id
            assert ev.deliveries == 2  # the workflow and the audit queue

            async def onboarding_waits() -> int:
                runs = await client.list_runs(workflow="onboard-user", status="waiting")
                return len(runs.items)

            await assert_eventually(onboarding_waits, timeout=20)
            assert await client.signal_matching("user.verified", {"userId": 42}) == 1
            await client.unsubscribe(sub.id)
            await client.unsubscribe(hook.id)

            await client.queues.send("audit", {"x": 1}, group_id=None, delay=None)
            msgs = await client.queues.receive(
                "audit", max_messages=10, visibility_timeout=30, wait=5
            )
            assert len(msgs) == 2
            fanned = next(m for m in msgs if m.body == {"userId": 42})
            assert fanned.headers == {"topic": "user.signup", "eventId": ev.event_id}
            for field in ("id", "body", "headers", "group_id", "receive_count", "receipt"):
                assert hasattr(msgs[0], field), field
            await client.queues.ack("audit", msgs[0].receipt)
            await client.queues.nack("audit", msgs[1].receipt, delay=5)


async def test_queue_receive__visibility_timeout_zero_is_one_rule_in_python_and_rest(
    client: Client,
) -> None:
    """0 means "visible again at once" (as in SQS) in the Python API and over REST alike."""
    transport = httpx.ASGITransport(app=create_app(client))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        await client.queues.send("zero", {"n": 1})
        assert len(await client.queues.receive("zero", visibility_timeout=0)) == 1
        answer = await http.post("/v1/queues/zero/messages/receive", json={"visibilityTimeout": 0})
        assert answer.status_code == 200, answer.text
        assert [m["body"] for m in answer.json()["messages"]] == [{"n": 1}]
