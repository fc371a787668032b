"""Publish: pattern fan-out, filters, idempotency, outbox, explain, and the subscription cache."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool, create_pool
from ripple.platform.core.wake import CH_SUBSCRIPTIONS, NullWaker, RedisWaker, SubscriptionsChanged
from ripple.platform.errors import InvalidInput, NotFound
from ripple.platform.events.fanout import FanOutItem, PublishedEvent, SubscriptionRow, TargetKind
from ripple.platform.events.publish import Publisher
from ripple.platform.events.publish_writer import MIN_SPILL
from ripple.platform.events.subscriptions import Subscriptions
from ripple.subscribers import QueueTarget, WorkflowTarget
from ripple.subscribers.queues.queue import QueueKind
from ripple.subscribers.queues.queues import Queues
from tests.helpers import assert_eventually


@dataclass
class Parts:
    pool: Pool
    waker: NullWaker
    subscriptions: Subscriptions
    publisher: Publisher
    queues: Queues


def make_parts(pool: Pool, settings: Settings, waker: NullWaker | None = None) -> Parts:
    waker = waker or NullWaker(settings.poll_interval)
    kinds = {"queue": QueueKind(waker)}
    subscriptions = Subscriptions(pool, waker, settings, kinds)
    publisher = Publisher(pool, waker, settings, subscriptions, kinds, None)
    return Parts(pool, waker, subscriptions, publisher, Queues(pool, waker, settings))


@pytest.fixture
def parts(pool: Pool, settings: Settings) -> Parts:
    return make_parts(pool, settings)


async def drain(queues: Queues, queue: str) -> list[dict[str, object]]:
    got = await queues.receive(queue, max_messages=100, visibility_timeout=60)
    await queues.ack_batch(queue, [m.receipt for m in got])
    return [{"body": m.body, **m.headers} for m in got]


async def test_publish__fans_out_by_pattern(parts: Parts) -> None:
    await parts.subscriptions.subscribe("user.*", QueueTarget("users").to_row())
    await parts.subscriptions.subscribe("#", QueueTarget("audit").to_row())
    await parts.subscriptions.subscribe("billing.#", QueueTarget("billing").to_row())

    result = await parts.publisher.publish("user.signup", {"userId": 42})
    assert result.deliveries == 2
    assert await drain(parts.queues, "users") == [
        {"body": {"userId": 42}, "topic": "user.signup", "eventId": result.event_id}
    ]
    assert len(await drain(parts.queues, "audit")) == 1
    assert await drain(parts.queues, "billing") == []

    assert (await parts.publisher.publish("billing", {"n": 1})).deliveries == 2
    assert (await parts.publisher.publish("user.a.b", {"n": 1})).deliveries == 1


async def test_publish__filter_delivers_only_contained_payloads(parts: Parts) -> None:
    await parts.subscriptions.subscribe(
        "order.*", QueueTarget("pro").to_row(), {"plan": "pro", "tags": ["vip"]}
    )
    assert (await parts.publisher.publish("order.paid", {"plan": "free"})).deliveries == 0
    assert (
        await parts.publisher.publish("order.paid", {"plan": "pro", "tags": []})
    ).deliveries == 0
    hit = await parts.publisher.publish("order.paid", {"plan": "pro", "tags": ["x", "vip"], "n": 1})
    assert hit.deliveries == 1
    assert [m["eventId"] for m in await drain(parts.queues, "pro")] == [hit.event_id]


async def test_publish__idempotency_key_returns_first_event(parts: Parts, pool: Pool) -> None:
    await parts.subscriptions.subscribe("a.b", QueueTarget("q").to_row())
    first = await parts.publisher.publish("a.b", {"x": 1}, "key-1")
    again = await parts.publisher.publish("a.b", {"x": 2}, "key-1")
    assert again.event_id == first.event_id
    assert (again.deliveries, again.duplicate) == (0, True)
    assert await pool.fetchval("SELECT count(*) FROM ripple_events") == 1
    assert len(await drain(parts.queues, "q")) == 1


async def test_publish__outbox_rollback_writes_nothing(parts: Parts, pool: Pool) -> None:
    await parts.subscriptions.subscribe("#", QueueTarget("q").to_row())

    class Boom(Exception):
        pass

    async def app_work() -> None:
        async with pool.acquire() as conn, conn.transaction():
            await conn.execute("CREATE TABLE app_orders (id int)")
            result = await parts.publisher.publish("order.created", {"id": 1}, conn=conn)
            assert result.deliveries == 1
            raise Boom

    with pytest.raises(Boom):
        await app_work()
    assert await pool.fetchval("SELECT count(*) FROM ripple_events") == 0
    assert await pool.fetchval("SELECT count(*) FROM ripple_queue_messages") == 0

    async with pool.acquire() as conn, conn.transaction():
        await parts.publisher.publish("order.created", {"id": 2}, conn=conn)
        # Not visible outside the caller's transaction before it commits.
        assert await pool.fetchval("SELECT count(*) FROM ripple_events") == 0
    assert await pool.fetchval("SELECT count(*) FROM ripple_events") == 1
    assert [m["body"] for m in await drain(parts.queues, "q")] == [{"id": 2}]


async def test_publish__validation_messages(parts: Parts) -> None:
    with pytest.raises(InvalidInput, match="wildcard"):
        await parts.publisher.publish("user.*", {})
    deep: object = 1
    for _ in range(40):
        deep = [deep]
    with pytest.raises(InvalidInput, match="nests deeper"):
        await parts.publisher.publish("a", deep)
    with pytest.raises(InvalidInput, match="not None"):
        await parts.publisher.publish("a", None)
    with pytest.raises(InvalidInput, match="unknown target type"):
        await parts.subscriptions.subscribe("a", {"type": "carrier-pigeon"})
    with pytest.raises(InvalidInput, match="queue name"):
        await parts.subscriptions.subscribe("a", {"type": "queue", "queue": "bad name!"})
    with pytest.raises(InvalidInput, match="mixes a wildcard"):
        await parts.subscriptions.subscribe("a.b*", QueueTarget("q").to_row())
    with pytest.raises(InvalidInput, match="filter must be a JSON object"):
        await parts.subscriptions.subscribe("a", QueueTarget("q").to_row(), [1])  # type: ignore[arg-type]


async def test_subscriptions__crud_pause_resume(parts: Parts) -> None:
    sub = await parts.subscriptions.subscribe("a.*", QueueTarget("q").to_row(), {"k": 1})
    assert (sub.status, sub.kind) == ("active", "queue")
    assert sub.target == {"type": "queue", "queue": "q"}
    assert [s.id for s in await parts.subscriptions.list()] == [sub.id]
    assert (await parts.subscriptions.get(sub.id)) == sub

    paused = await parts.subscriptions.pause(sub.id)
    assert paused.status == "paused"
    assert (await parts.publisher.publish("a.b", {"k": 1})).deliveries == 0
    await parts.subscriptions.resume(sub.id)
    assert (await parts.publisher.publish("a.b", {"k": 1})).deliveries == 1

    assert await parts.subscriptions.unsubscribe(sub.id) is True
    assert await parts.subscriptions.unsubscribe(sub.id) is False
    assert await parts.subscriptions.unsubscribe("not-a-uuid") is False
    with pytest.raises(NotFound):
        await parts.subscriptions.pause(sub.id)
    assert (await parts.publisher.publish("a.b", {"k": 1})).deliveries == 0


async def test_explain__says_why(parts: Parts) -> None:
    hit = await parts.subscriptions.subscribe("user.*", QueueTarget("a").to_row())
    other = await parts.subscriptions.subscribe("billing.#", QueueTarget("b").to_row())
    filtered = await parts.subscriptions.subscribe(
        "user.signup", QueueTarget("c").to_row(), {"user": {"plan": "pro"}}
    )
    paused = await parts.subscriptions.subscribe("#", QueueTarget("d").to_row())
    await parts.subscriptions.pause(paused.id)

    explanation = await parts.publisher.explain("user.signup", {"user": {"plan": "free"}})
    verdicts = {v.subscription_id: v for v in explanation.subscriptions}
    assert (verdicts[hit.id].matched, verdicts[hit.id].reason) == (True, None)
    assert "does not match" in (verdicts[other.id].reason or "")
    assert verdicts[filtered.id].reason == "filter mismatch at 'user.plan'"
    assert verdicts[paused.id].reason == "subscription is paused"
    assert [v.subscription_id for v in explanation.matched] == [hit.id]
    # A dry run writes nothing.
    assert await parts.pool.fetchval("SELECT count(*) FROM ripple_events") == 0


async def test_cache__lost_hint_is_caught_by_version_check(
    settings: Settings, database_url: str
) -> None:
    # Two "processes": separate pools and NullWakers, so no hint crosses between them.
    pool_a = await create_pool(settings, dsn=database_url)
    pool_b = await create_pool(settings, dsn=database_url)
    try:
        a = make_parts(pool_a, settings)
        b = make_parts(pool_b, settings)
        assert (await a.publisher.publish("x.y", {})).deliveries == 0  # cache loaded, empty
        await b.subscriptions.subscribe("x.*", QueueTarget("q").to_row())

        async def delivered() -> bool:
            return (await a.publisher.publish("x.y", {})).deliveries == 1

        await assert_eventually(delivered, timeout=5 * settings.poll_interval + 5)
    finally:
        await pool_a.close()
        await pool_b.close()


async def test_cache__hint_invalidates_at_once(
    parts: Parts, pool: Pool, settings: Settings
) -> None:
    # Another Subscriptions object sharing this process's waker: the hint reaches the cache.
    other = make_parts(pool, settings, parts.waker)
    await parts.publisher.publish("x.y", {})
    await other.subscriptions.subscribe("x.*", QueueTarget("q").to_row())
    assert (await parts.publisher.publish("x.y", {})).deliveries == 1


async def test_targets__positional_construction() -> None:
    assert QueueTarget("audit").to_row() == {"type": "queue", "queue": "audit"}
    assert WorkflowTarget("onboard-user").to_row() == {
        "type": "workflow",
        "workflow": "onboard-user",
    }

    class Definition:
        name = "from-definition"

    assert WorkflowTarget(Definition()).workflow == "from-definition"


class ExplodingKind:
    """A target kind that refuses payloads marked `boom` (to fail one event of a group)."""

    kind = "queue"

    def __init__(self, inner: QueueKind) -> None:
        self._inner = inner

    async def validate(self, target: dict[str, object]) -> dict[str, object]:
        return await self._inner.validate(target)

    async def fan_out(self, conn: Connection, items: Sequence[FanOutItem]) -> list[int]:
        for event, _ in items:
            if isinstance(event.payload, dict) and event.payload.get("boom"):
                raise InvalidInput("boom")
        return await self._inner.fan_out(conn, items)

    def count_committed(self, written: Sequence[tuple[Sequence[SubscriptionRow], int]]) -> None:
        return None

    def after_commit(self, event: PublishedEvent, subs: Sequence[SubscriptionRow]) -> None:
        self._inner.after_commit(event, subs)


async def test_publish__group_commit_isolates_a_failing_event(
    pool: Pool, settings: Settings
) -> None:
    waker = NullWaker(settings.poll_interval)
    kinds = {"queue": ExplodingKind(QueueKind(waker))}
    subscriptions = Subscriptions(pool, waker, settings, kinds)
    publisher = Publisher(pool, waker, settings, subscriptions, kinds, None)
    await subscriptions.subscribe("#", QueueTarget("q").to_row())

    payloads = [{"n": i, "boom": i == 7} for i in range(40)]
    with capture_logs() as logs:
        results = await asyncio.gather(
            *(publisher.publish("t", p) for p in payloads), return_exceptions=True
        )
    # The bad event was committed in a group with others, which were then retried alone.
    assert max(e["size"] for e in logs if e["event"] == "publish_group_failed") > 1
    failed = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
    assert failed == [7]
    assert await pool.fetchval("SELECT count(*) FROM ripple_events") == 39
    assert await pool.fetchval("SELECT count(*) FROM ripple_queue_messages") == 39


class GatedKind(ExplodingKind):
    """A queue kind that records each group it writes and holds it until `gate` is set."""

    def __init__(self, inner: QueueKind) -> None:
        super().__init__(inner)
        self.gate = asyncio.Event()
        self.groups: list[int] = []

    async def fan_out(self, conn: Connection, items: Sequence[FanOutItem]) -> list[int]:
        self.groups.append(len(items))
        await self.gate.wait()
        return await super().fan_out(conn, items)


async def test_publish__a_second_group_goes_in_flight_only_once_min_spill_events_wait(
    pool: Pool, settings: Settings
) -> None:
    waker = NullWaker(settings.poll_interval)
    kind = GatedKind(QueueKind(waker))
    subscriptions = Subscriptions(pool, waker, settings, {"queue": kind})
    publisher = Publisher(pool, waker, settings, subscriptions, {"queue": kind}, None)
    await subscriptions.subscribe("#", QueueTarget("q").to_row())
    waiting = publisher._committer._group._queue

    first = asyncio.ensure_future(publisher.publish("t", {"n": 0}))
    await assert_eventually(lambda: kind.groups == [1])  # in flight, held
    rest = [asyncio.ensure_future(publisher.publish("t", {"n": n})) for n in range(1, MIN_SPILL)]
    await assert_eventually(lambda: len(waiting) == MIN_SPILL - 1)
    assert kind.groups == [1]  # fewer than MIN_SPILL wait: no second transaction
    rest.append(asyncio.ensure_future(publisher.publish("t", {"n": MIN_SPILL})))
    await assert_eventually(lambda: kind.groups == [1, MIN_SPILL])  # the spill starts one
    kind.gate.set()
    await asyncio.gather(first, *rest)
    assert kind.groups == [1, MIN_SPILL]
    assert await pool.fetchval("SELECT count(*) FROM ripple_queue_messages") == MIN_SPILL + 1


class LateExplodingKind:
    """A `workflow` kind (written after `queue`: kinds go in name order) that refuses `boom`
    payloads, so a group fails after its queue messages were written."""

    kind = "workflow"

    async def validate(self, target: dict[str, object]) -> dict[str, object]:
        return target

    async def fan_out(self, conn: Connection, items: Sequence[FanOutItem]) -> list[int]:
        if any(isinstance(e.payload, dict) and e.payload.get("boom") for e, _ in items):
            raise InvalidInput("boom")
        return [0 for _ in items]

    def count_committed(self, written: Sequence[tuple[Sequence[SubscriptionRow], int]]) -> None:
        return None

    def after_commit(self, event: PublishedEvent, subs: Sequence[SubscriptionRow]) -> None:
        return None


async def test_publish__metrics_count_committed_events_once(pool: Pool, settings: Settings) -> None:
    waker = NullWaker(settings.poll_interval)
    kinds: dict[str, TargetKind] = {"queue": QueueKind(waker), "workflow": LateExplodingKind()}
    subscriptions = Subscriptions(pool, waker, settings, kinds)
    publisher = Publisher(pool, waker, settings, subscriptions, kinds, None)
    await subscriptions.subscribe("#", QueueTarget("q").to_row())
    await subscriptions.subscribe("#", {"type": "workflow", "workflow": "w"})
    published, created = _published("m"), _created("queue")

    payloads = [{"n": i, "boom": i == 7} for i in range(40)]
    with capture_logs() as logs:
        await asyncio.gather(*(publisher.publish("m", p) for p in payloads), return_exceptions=True)
    assert max(e["size"] for e in logs if e["event"] == "publish_group_failed") > 1
    # The failed group wrote (then rolled back) queue messages before failing; only what
    # committed counts, once: 39 events, 39 messages.
    assert await pool.fetchval("SELECT count(*) FROM ripple_queue_messages") == 39
    assert _published("m") - published == 39
    assert _created("queue") - created == 39


def _published(prefix: str) -> float:
    return REGISTRY.get_sample_value("events_published_total", {"topic_prefix": prefix}) or 0.0


def _created(kind: str) -> float:
    labels = {"kind": kind, "outcome": "created"}
    return REGISTRY.get_sample_value("deliveries_total", labels) or 0.0


async def test_publish__concurrent_same_key_writes_one_event(parts: Parts, pool: Pool) -> None:
    await parts.subscriptions.subscribe("#", QueueTarget("q").to_row())
    results = await asyncio.gather(
        *(parts.publisher.publish("t", {"n": i}, "same-key") for i in range(20))
    )
    assert len({r.event_id for r in results}) == 1
    assert sum(r.deliveries for r in results) == 1
    assert sum(not r.duplicate for r in results) == 1
    assert await pool.fetchval("SELECT count(*) FROM ripple_queue_messages") == 1


async def test_subscription_cache__concurrent_first_calls_keep_one_live_listener(
    pool: Pool, settings: Settings
) -> None:
    # listen() waits for Redis to confirm; two first callers racing used to leave the cache
    # holding a listener whose context manager was collected (unregistered): changes made by
    # other processes then reached it only by polling.
    waker = RedisWaker(settings.redis_url or "", prefix=settings.redis_prefix, poll_interval=30)
    await waker.start()
    try:
        await asyncio.wait_for(waker.connected.wait(), 5)
        parts = make_parts(pool, settings, waker)
        # The first caller's confirmation is the slowest (as when Redis answers late).
        confirm = waker._subscribed
        calls = 0

        async def first_is_slow(channel: str) -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                await asyncio.sleep(0.05)
            await confirm(channel)

        waker._subscribed = first_is_slow  # type: ignore[method-assign]
        await asyncio.gather(*(parts.subscriptions.compiled() for _ in range(5)))
        gc.collect()
        await asyncio.sleep(0.05)  # collected listen() blocks finish unregistering
        listeners = waker._listeners.get(CH_SUBSCRIPTIONS, set())
        assert len(listeners) == 1
        other = make_parts(pool, settings)  # another process's view
        await other.subscriptions.subscribe("late.*", QueueTarget("late").to_row())
        waker.notify(SubscriptionsChanged())  # as that process's hint would arrive
        assert [s.pattern.text for s in await parts.subscriptions.compiled()] == ["late.*"]
    finally:
        await waker.close()
