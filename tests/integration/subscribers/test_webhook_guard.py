"""Webhook delivery guards: SSRF at delivery with pinned connections, timeouts, slow endpoints,
lost leases and concurrent dispatchers (real sockets to local sinks)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import pytest

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool, transaction
from ripple.platform.core.wake import NullWaker
from ripple.platform.events.fanout import SubscriptionRow
from ripple.subscribers.webhooks import delivery_store as store
from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher
from ripple.subscribers.webhooks.outcomes import Decision
from ripple.subscribers.webhooks.webhook import Deliveries
from tests.helpers import assert_eventually
from tests.integration.subscribers.conftest import Hooks
from tests.integration.subscribers.webhook_sink import Received, Reply, Sink

#: The circuit breaker at its settings' defaults.
BREAKER = store.Breaker(failures=5, probe_interval=30.0)


class ScriptedResolver:
    """DNS seam: answers cycle through the script on each call for a host."""

    def __init__(self, answers: dict[str, list[list[str]]]) -> None:
        self.answers = answers
        self.calls = 0

    async def resolve(self, host: str, port: int) -> list[str]:
        self.calls += 1
        options = self.answers[host]
        return options[(self.calls - 1) % len(options)]


async def test_webhook_dispatcher__connects_to_checked_ip_with_original_host(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    resolver = ScriptedResolver({"hooks.example": [["127.0.0.1"]]})
    async with Sink() as sink:
        sub = await hooks.subscribe(sink.url(host="hooks.example"))
        await hooks.publish([sub])
        d = WebhookDispatcher(pool, NullWaker(), hook_settings, resolver=resolver)
        await d.run_until_idle()
    (row,) = await hooks.deliveries(sub)
    assert row["status"] == "delivered"
    assert sink.received[0].headers["host"] == f"hooks.example:{sink.port}"


async def test_webhook_dispatcher__refuses_private_address_at_delivery(
    pool: Pool, settings: Settings, hook_settings: Settings, hooks: Hooks
) -> None:
    # Subscribed while loopback was allowed; the operator then removed the allow list.
    async with Sink() as sink:
        sub = await hooks.subscribe(sink.url())
        await hooks.publish([sub])
        await WebhookDispatcher(pool, NullWaker(), settings).run_until_idle()
    assert sink.received == []
    (row,) = await hooks.deliveries(sub)
    assert row["status"] == "pending"
    assert "BlockedAddress" in row["last_error"]
    assert "loopback" in row["last_error"]


async def test_webhook_dispatcher__each_connection_uses_the_resolution_it_checked(
    ops: Deliveries, pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    # DNS rebinding: the host first answers loopback (allowed here), then cloud metadata. Each
    # new connection resolves once, checks that answer and connects to it, so the second
    # connection is refused without a request being sent and no second lookup is made.
    resolver = ScriptedResolver({"rebind.example": [["127.0.0.1"], ["169.254.169.254"]]})
    async with Sink() as sink:
        sub = await hooks.subscribe(sink.url(host="rebind.example"))
        await hooks.publish([sub])
        await WebhookDispatcher(
            pool, NullWaker(), hook_settings, resolver=resolver
        ).run_until_idle()
        assert resolver.calls == 1
        assert len(sink.received) == 1
        await hooks.publish([sub])
        # a new dispatcher has no pooled connection: it must resolve (and check) again
        await WebhookDispatcher(
            pool, NullWaker(), hook_settings, resolver=resolver
        ).run_until_idle()
    assert resolver.calls == 2
    assert len(sink.received) == 1
    rows = await hooks.deliveries(sub)
    assert sorted(r["status"] for r in rows) == ["delivered", "pending"]
    (blocked,) = [r for r in rows if r["status"] == "pending"]
    assert "cloud metadata" in blocked["last_error"]
    attempts = await ops.attempts(str(blocked["id"]))
    assert attempts[0].error is not None
    assert attempts[0].error.startswith("BlockedAddress")


async def test_webhook_dispatcher__one_refused_answer_refuses_the_host(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    resolver = ScriptedResolver({"mixed.example": [["127.0.0.1", "10.0.0.7"]]})
    async with Sink() as sink:
        sub = await hooks.subscribe(sink.url(host="mixed.example"))
        await hooks.publish([sub])
        await WebhookDispatcher(
            pool, NullWaker(), hook_settings, resolver=resolver
        ).run_until_idle()
    assert sink.received == []
    (row,) = await hooks.deliveries(sub)
    assert "10.0.0.7 (private (RFC 1918))" in row["last_error"]


async def test_webhook_dispatcher__endless_response_body_is_not_buffered(
    ops: Deliveries, pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    # The endpoint answers 200 and then streams body bytes forever: the attempt reads its
    # capped excerpt, counts as delivered and drops the connection instead of reading on.
    async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        chunk = b"x" * 8192
        with contextlib.suppress(ConnectionError):
            while True:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                await writer.drain()
        writer.close()

    server = await asyncio.start_server(endless, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        sub = await hooks.subscribe(f"http://127.0.0.1:{port}/hook", timeout=60)
        await hooks.publish([sub])
        await WebhookDispatcher(pool, NullWaker(), hook_settings).run_until_idle()
    finally:
        server.close()
    (row,) = await hooks.deliveries(sub)
    assert (row["status"], row["last_status_code"]) == ("delivered", 200)
    (attempt,) = await ops.attempts(str(row["id"]))
    assert attempt.response_body == "x" * 2048


async def test_webhook_dispatcher__connections_per_origin_are_capped(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    # Four subscriptions of one origin, each allowed 2 in flight, but the origin only 3
    # connections: the hung sink never sees more than 3 requests at once.
    settings = hook_settings.model_copy(
        update={
            "webhook_concurrency": 8,
            "webhook_endpoint_concurrency": 2,
            "webhook_origin_concurrency": 3,
        }
    )
    slow = Sink.hung()
    async with slow:
        subs = [await hooks.subscribe(slow.url(f"/s{i}"), timeout=120) for i in range(4)]
        for _ in range(2):
            await hooks.publish(subs)
        d = WebhookDispatcher(pool, NullWaker(), settings)
        task = asyncio.create_task(d.run())
        try:

            async def all_claimed() -> bool:
                count = await pool.fetchval(
                    "SELECT count(*) FROM ripple_webhook_deliveries WHERE attempts = 1"
                )
                return bool(count == 8)

            await assert_eventually(all_claimed, timeout=20)
            await assert_eventually(lambda: len(slow.received) == 3, timeout=20)
            assert len(slow.received) == 3
        finally:
            d.stop()
            await asyncio.wait_for(task, 15)


async def test_webhook_dispatcher__attempt_times_out(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    sink = Sink.hung()
    async with sink:
        sub = await hooks.subscribe(sink.url(), timeout=0.3)
        await hooks.publish([sub])
        await WebhookDispatcher(pool, NullWaker(), hook_settings).run_until_idle()
    (row,) = await hooks.deliveries(sub)
    assert row["status"] == "pending"
    assert row["last_error"].startswith("no response: TimeoutError")


async def test_webhook_dispatcher__a_status_sent_before_the_timeout_still_counts(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    # The endpoint answers 200 and never finishes the body it announced: the attempt times
    # out while reading it, and the status that did arrive decides the outcome.
    done = asyncio.Event()

    async def answer_then_stall(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        await done.wait()
        writer.close()

    server = await asyncio.start_server(answer_then_stall, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        sub = await hooks.subscribe(f"http://127.0.0.1:{port}/hook", timeout=0.3)
        await hooks.publish([sub])
        try:
            await WebhookDispatcher(pool, NullWaker(), hook_settings).run_until_idle()
        finally:
            done.set()
    (row,) = await hooks.deliveries(sub)
    assert (row["status"], row["last_status_code"], row["attempts"]) == ("delivered", 200, 1)


async def test_webhook_dispatcher__slow_endpoint_does_not_block_others(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    settings = hook_settings.model_copy(
        update={"webhook_concurrency": 4, "webhook_endpoint_concurrency": 2}
    )
    slow = Sink.hung()
    async with slow, Sink() as fast:
        slow_sub = await hooks.subscribe(slow.url(), timeout=120)
        fast_sub = await hooks.subscribe(fast.url())
        for _ in range(6):
            await hooks.publish([slow_sub])
        for _ in range(10):
            await hooks.publish([fast_sub])
        d = WebhookDispatcher(pool, NullWaker(), settings)
        task = asyncio.create_task(d.run())
        try:

            async def fast_done() -> bool:
                rows = await hooks.deliveries(fast_sub)
                return all(r["status"] == "delivered" for r in rows)

            await assert_eventually(fast_done, timeout=20)
            assert len(fast.received) == 10
            # the slow endpoint holds at most its per-endpoint share of the slots
            assert len(slow.received) <= 2
        finally:
            d.stop()
            await asyncio.wait_for(task, 15)
    slow_rows = await hooks.deliveries(slow_sub)
    assert {r["status"] for r in slow_rows} == {"pending"}
    # shutdown cancelled the hung attempts and released their claims (due again at once)
    assert all(r["claim_token"] is None for r in slow_rows)
    assert [r["attempts"] for r in slow_rows].count(1) == len(slow.received)


async def test_webhook_dispatcher__slow_endpoints_holding_most_slots_do_not_starve_others(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    # 20 slots, 4 per endpoint: four hung endpoints hold 16, leaving fewer free slots than a
    # refill batch (a quarter of 20); the fast endpoint must still be claimed and delivered.
    settings = hook_settings.model_copy(
        update={
            "webhook_concurrency": 20,
            "webhook_endpoint_concurrency": 4,
            "webhook_origin_concurrency": 20,
        }
    )
    slow = Sink.hung()
    async with slow, Sink() as fast:
        slow_subs = [await hooks.subscribe(slow.url(f"/s{i}"), timeout=120) for i in range(4)]
        fast_sub = await hooks.subscribe(fast.url())
        for sub in slow_subs:
            for _ in range(4):
                await hooks.publish([sub])
        d = WebhookDispatcher(pool, NullWaker(), settings)
        task = asyncio.create_task(d.run())
        try:
            await assert_eventually(lambda: len(slow.received) == 16, timeout=20)
            for _ in range(10):
                await hooks.publish([fast_sub])

            async def fast_done() -> bool:
                rows = await hooks.deliveries(fast_sub)
                return all(r["status"] == "delivered" for r in rows)

            await assert_eventually(fast_done, timeout=20)
            assert len(fast.received) == 10
        finally:
            d.stop()
            await asyncio.wait_for(task, 15)


async def test_webhook_dispatcher__lost_lease_is_retried_and_stale_claim_fenced(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    async with Sink() as sink:
        sub = await hooks.subscribe(sink.url())
        await hooks.publish([sub])
        # a dispatcher claims the delivery and dies before recording anything
        async with transaction(pool) as conn:
            (dead,) = await _claim(conn, 10, 10)
        assert await WebhookDispatcher(pool, NullWaker(), hook_settings).run_until_idle() == 0
        # move time past the lease
        await pool.execute("UPDATE ripple_webhook_deliveries SET next_attempt_at = now()")
        await WebhookDispatcher(pool, NullWaker(), hook_settings).run_until_idle()
        (row,) = await hooks.deliveries(sub)
        assert (row["status"], row["attempts"]) == ("delivered", 2)
        # the dead dispatcher's late write is refused
        late = store.FinishedAttempt(
            delivery=dead,
            status="failed",
            delay=0.0,
            status_code=None,
            last_error="late",
            started_at=datetime.now(UTC),
            latency_ms=1.0,
            outcome="failed",
            error="late",
            response_body=None,
            healthy=False,
        )
        async with transaction(pool) as conn:
            assert await store.finish_attempts(conn, [late], 60.0, BREAKER) == [(False, False)]
    (row,) = await hooks.deliveries(sub)
    assert row["status"] == "delivered"
    assert len(sink.received) == 1


async def test_webhook_dispatcher__concurrent_dispatchers_never_share_a_delivery(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    settings = hook_settings.model_copy(
        update={"webhook_concurrency": 5, "webhook_endpoint_concurrency": 5}
    )

    async def respond(_r: Received, _n: int) -> Reply:
        await asyncio.sleep(0)
        return Reply(200)

    async with Sink(respond) as sink:
        subs = [await hooks.subscribe(sink.url(f"/s{i}")) for i in range(3)]
        for _ in range(15):
            await hooks.publish(subs)
        dispatchers = [WebhookDispatcher(pool, NullWaker(), settings) for _ in range(4)]
        await asyncio.gather(*(d.run_until_idle() for d in dispatchers))
    ids = [r.headers["webhook-id"] for r in sink.received]
    assert len(ids) == 45
    assert len(set(ids)) == 45
    count = await pool.fetchval(
        "SELECT count(*) FROM ripple_webhook_deliveries WHERE status = 'delivered'"
    )
    assert count == 45


async def test_webhook_dispatcher__orphaned_deliveries_fail(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    sub = await hooks.subscribe("http://127.0.0.1:9/gone")
    await hooks.publish([sub])
    await pool.execute("DELETE FROM ripple_subscriptions WHERE id = $1", uuid.UUID(sub.id))
    async with transaction(pool) as conn:
        assert await store.fail_orphans(conn) == 1
    (row,) = await hooks.deliveries(sub)
    assert (row["status"], row["last_error"]) == ("failed", "subscription was deleted")


async def test_webhook_claim__reads_due_index_in_order_on_a_table_never_analyzed(
    pool: Pool, hooks: Hooks
) -> None:
    # A backlog that arrived since the table was last analyzed (a fresh install, a burst after
    # a quiet hour): the claim must still read the due index in order and stop at its limit,
    # not fetch every pending delivery and sort them (8-12 ms per claim at 20,000).
    sub = await _unanalyzed_backlog(pool, hooks)
    async with transaction(pool) as conn:
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + store.CLAIM_DUE,
            10,
            [uuid.UUID(sub.id)],
            [],
            [],
            8,
            uuid.uuid4(),
            15.0,
            10.0,
            30.0,
            store.RATE_MARGIN,
            store.RATE_BURST,
        )
        lock_plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + store.LOCK_CLAIMABLE, 10, [], store.CLAIM_LOCK_CLASS
        )
    # The table is partitioned: its due index is one index per partition.
    due = {
        r["relname"]
        for r in await pool.fetch(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'ripple_webhook_deliveries_due'::regclass"
        )
    }
    assert due

    def in_due_order(node: dict[str, Any]) -> bool:
        """An ordered read of the due indexes: one, or a merge of each partition's."""
        if node["Node Type"] == "Merge Append":
            return all(in_due_order(child) for child in node["Plans"])
        return node["Node Type"] == "Index Scan" and node.get("Index Name") in due

    doc = _plan_doc(plan)
    nodes = list(_plan_nodes(doc[0]["Plan"]))
    # The due rows are locked straight off the index, in its order (no sort in between).
    (lock,) = [n for n in nodes if n["Node Type"] == "LockRows"]
    (scan,) = lock["Plans"]
    assert in_due_order(scan), lock
    # Finding the claimable subscriptions reads the due index in order too, up to its limit.
    nodes = list(_plan_nodes(_plan_doc(lock_plan)[0]["Plan"]))
    limits = [n for n in nodes if n["Node Type"] == "Limit"]
    assert any(in_due_order(child) for limit in limits for child in limit["Plans"]), limits


async def _claim(conn: Connection, limit: int, endpoint_limit: int) -> list[store.ClaimedDelivery]:
    """Claim as a dispatcher with nothing in flight does (15 s timeout, 10 s lease margin)."""
    claim = await store.claim_due(
        conn,
        limit=limit,
        endpoint_limit=endpoint_limit,
        in_flight={},
        default_timeout=15,
        lease_margin=10,
        probe_interval=30,
    )
    return claim.deliveries


def _finished(
    c: store.ClaimedDelivery,
    *,
    healthy: bool = True,
    delay: float = 0.0,
    started: datetime | None = None,
) -> store.FinishedAttempt:
    """The outcome of an attempt on `c`: a 204 when `healthy`, else a 500 to retry."""
    return store.FinishedAttempt(
        delivery=c,
        status="delivered" if healthy else "pending",
        delay=delay,
        status_code=204 if healthy else 500,
        last_error=None if healthy else "endpoint returned 500",
        started_at=started or datetime.now(UTC),
        latency_ms=1.0,
        outcome="delivered" if healthy else "retry",
        error=None,
        response_body="",
        healthy=healthy,
    )


async def _unanalyzed_backlog(pool: Pool, hooks: Hooks) -> SubscriptionRow:
    """5,000 pending deliveries of one subscription that the table was never analyzed with
    (a fresh install, a burst after a quiet hour): statistics say the table is nearly empty."""
    sub = await hooks.subscribe("http://127.0.0.1:9/x")
    # On each partition: a partitioned table has no storage parameters of its own.
    await pool.execute(
        """
        DO $$
        DECLARE part regclass;
        BEGIN
            FOR part IN SELECT inhrelid::regclass FROM pg_inherits
                        WHERE inhparent = 'ripple_webhook_deliveries'::regclass LOOP
                EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', part);
            END LOOP;
        END
        $$
        """
    )
    await pool.execute(
        """
        INSERT INTO ripple_webhook_deliveries (id, subscription_id, event_id, topic, event_time)
        SELECT ripple_uuid7(), $1, ripple_uuid7(), 't', now() FROM generate_series(1, 5000)
        """,
        uuid.UUID(sub.id),
    )
    return sub


def _plan_doc(plan: Any) -> Any:
    """An `EXPLAIN (FORMAT JSON)` result as JSON (the pool may or may not have decoded it)."""
    return json.loads(plan) if isinstance(plan, str) else plan


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


async def test_webhook_dispatcher__run_until_idle_drains_a_saturated_endpoint(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    # Regression: attempts ending while a claim ran (which skipped the then-saturated
    # endpoint) made the dispatcher look idle with deliveries still due.
    settings = hook_settings.model_copy(update={"webhook_endpoint_concurrency": 2})
    async with Sink() as sink:
        sub = await hooks.subscribe(sink.url())
        for _ in range(60):
            await hooks.publish([sub])
        made = await WebhookDispatcher(pool, NullWaker(), settings).run_until_idle()
    assert made == 60
    assert {r["status"] for r in await hooks.deliveries(sub)} == {"delivered"}
    assert len(sink.received) == 60


async def test_webhook_dispatcher__woken_by_another_process_hint(
    pool: Pool, hook_settings: Settings, redis_url: str, redis_prefix: str
) -> None:
    from ripple.platform.core.wake import RedisWaker
    from ripple.subscribers.webhooks.webhook import WebhookKind

    # A poll interval far beyond the wait below: only the Redis hint can wake the dispatcher.
    slow_poll = hook_settings.model_copy(update={"poll_interval": 60.0})
    worker_waker = RedisWaker(redis_url, prefix=redis_prefix, poll_interval=60.0)
    publisher_waker = RedisWaker(redis_url, prefix=redis_prefix, poll_interval=60.0)
    await worker_waker.start()
    await publisher_waker.start()
    hooks = Hooks(pool, hook_settings)
    hooks.kind = WebhookKind(hook_settings, publisher_waker)
    d = WebhookDispatcher(pool, worker_waker, slow_poll)
    try:
        async with Sink() as sink:
            sub = await hooks.subscribe(sink.url())
            rounds: list[int] = []
            claim_round = d._claim_round

            async def counted(**kw: bool) -> int:
                rounds.append(await claim_round(**kw))
                return rounds[-1]

            d._claim_round = counted  # type: ignore[method-assign]
            await asyncio.wait_for(worker_waker.connected.wait(), 10)
            task = asyncio.create_task(d.run())
            # the dispatcher found nothing and is now waiting (for a hint, or 60 s)
            await assert_eventually(lambda: rounds == [0])
            event = await hooks.publish([sub])
            hooks.kind.after_commit(event, [sub])
            await assert_eventually(lambda: len(sink.received) == 1, timeout=20)
            assert rounds[:2] == [0, 1]
            d.stop()
            await asyncio.wait_for(task, 10)
    finally:
        await worker_waker.close()
        await publisher_waker.close()


async def test_webhook_finish_attempts__one_batch_fences_records_and_folds_health(
    pool: Pool, hooks: Hooks
) -> None:
    ok_sub = await hooks.subscribe("http://127.0.0.1:9/ok")
    bad_sub = await hooks.subscribe("http://127.0.0.1:9/bad")
    await hooks.publish([ok_sub, bad_sub])
    await hooks.publish([ok_sub, bad_sub])
    async with transaction(pool) as conn:
        claimed = await _claim(conn, 10, 10)
    assert len(claimed) == 4
    # bad_sub has been failing for two hours; one of its claims was lost to another dispatcher
    await pool.execute(
        "INSERT INTO ripple_webhook_health (subscription_id, failing_since) "
        "VALUES ($1, now() - interval '2 hours')",
        uuid.UUID(bad_sub.id),
    )
    ok = [c for c in claimed if c.subscription_id == ok_sub.id]
    bad = [c for c in claimed if c.subscription_id == bad_sub.id]
    await pool.execute(
        "UPDATE ripple_webhook_deliveries SET claim_token = $2 WHERE id = $1",
        uuid.UUID(bad[1].id),
        uuid.uuid4(),
    )
    started = datetime.now(UTC)

    def finished(c: store.ClaimedDelivery, healthy: bool) -> store.FinishedAttempt:
        return _finished(c, healthy=healthy, delay=60.0, started=started)

    batch = [finished(ok[0], True), finished(bad[0], False), finished(ok[1], False)]
    batch.append(finished(bad[1], False))
    async with pool.acquire() as conn:
        results = await store.finish_attempts(conn, batch, 3600.0, BREAKER)
    # ok_sub had a success in the batch: healthy, never exhausted; bad_sub is exhausted
    assert results == [(True, False), (True, True), (True, False), (False, False)]
    statuses = {
        str(r["id"]): r["status"]
        for r in await pool.fetch("SELECT id, status FROM ripple_webhook_deliveries")
    }
    assert [statuses[c.id] for c in (ok[0], bad[0], ok[1], bad[1])] == [
        "delivered",
        "pending",
        "pending",
        "pending",
    ]
    recorded = await pool.fetchval("SELECT count(*) FROM ripple_webhook_attempts")
    assert recorded == 3  # the lost claim's attempt is not recorded
    health = {
        str(r["subscription_id"]): r
        for r in await pool.fetch("SELECT * FROM ripple_webhook_health")
    }
    assert health[ok_sub.id]["failing_since"] is None
    assert health[ok_sub.id]["last_success_at"] is not None
    assert health[ok_sub.id]["last_failure_at"] is not None
    assert health[bad_sub.id]["failing_since"] < started


async def test_webhook_dispatcher__outcome_handed_over_as_the_writer_returns_is_written(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    # Regression: the writer that has just found nothing left to write and returned stays in
    # the dispatcher's set until its done-callback runs. An attempt ending in between saw "a
    # writer is running", started none, and its outcome waited for the next attempt (forever,
    # on a quiet endpoint; the lease then expired and the webhook was sent again).
    sub = await hooks.subscribe("http://127.0.0.1:9/x")
    await hooks.publish([sub])
    async with pool.acquire() as conn:
        (claimed,) = await _claim(conn, 1, 8)
    dispatcher = WebhookDispatcher(pool, NullWaker(), hook_settings)
    returned = asyncio.ensure_future(asyncio.sleep(0))
    await returned  # done, its done-callbacks (the set's discard) not run yet
    recorder = dispatcher._recorder
    recorder.writers.add(returned)
    await recorder.record(claimed, Decision("delivered"), datetime.now(UTC), 1.0, 204, None, "")

    async def delivered() -> bool:
        (row,) = await hooks.deliveries(sub)
        return bool(row["status"] == "delivered")

    await assert_eventually(delivered, timeout=10)
    recorder.writers.discard(returned)
    await recorder.recorded()


async def test_webhook_finish__a_healthy_endpoint_does_not_serialize_concurrent_writes(
    pool: Pool, hooks: Hooks
) -> None:
    # ON CONFLICT DO UPDATE locks the conflicting health row before it tests its WHERE, so
    # every batch of successes queued behind the previous batch's open transaction, although
    # a healthy endpoint's row is rewritten at most once a second. Now it is not touched.
    sub = await hooks.subscribe("http://127.0.0.1:9/x")
    for _ in range(3):
        await hooks.publish([sub])
    async with pool.acquire() as conn:
        claimed = await _claim(conn, 3, 8)
    assert len(claimed) == 3

    async with pool.acquire() as conn:  # the endpoint's health row: healthy, just now
        assert await store.finish_attempts(conn, [_finished(claimed[0])], 60.0, BREAKER) == [
            (True, False)
        ]
    # the second batch is written while the first one's transaction is still open
    async with pool.acquire() as first, pool.acquire() as second, first.transaction():
        assert await store.finish_attempts(first, [_finished(claimed[1])], 60.0, BREAKER) == [
            (True, False)
        ]
        async with second.transaction():
            await second.execute("SET LOCAL lock_timeout = '2s'")
            # with the old statement: LockNotAvailableError after 2 s
            assert await store.finish_attempts(second, [_finished(claimed[2])], 60.0, BREAKER) == [
                (True, False)
            ]


async def test_webhook_finish_and_release__find_claims_by_id_on_a_table_never_analyzed(
    pool: Pool, hooks: Hooks
) -> None:
    # A backlog that arrived since the table was last analyzed: ending claims must look the
    # claimed rows up by id, not read every pending delivery for each batch (the status test
    # made the planner scan the whole backlog through the status index: 20 ms per batch of 20).
    await _unanalyzed_backlog(pool, hooks)
    async with pool.acquire() as conn:
        claimed = await _claim(conn, 10, 10)
    assert len(claimed) == 10
    finished = [_finished(c) for c in claimed]
    statements = [
        (store.FINISH_ATTEMPTS, (store.finish_document(finished), 3600.0, 5, 30.0)),
        (
            store.RELEASE_CLAIMS,
            ([uuid.UUID(c.id) for c in claimed], [c.claim_token for c in claimed], 1),
        ),
    ]
    for statement, args in statements:
        async with pool.acquire() as conn:
            tx = conn.transaction()
            await tx.start()
            try:
                plan = await conn.fetchval("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, *args)
            finally:
                await tx.rollback()
        doc = _plan_doc(plan)
        scans = [
            n
            for n in _plan_nodes(doc[0]["Plan"])
            # the table or its partitions
            if n.get("Relation Name", "").startswith("ripple_webhook_deliveries")
            and "Scan" in n["Node Type"]
        ]
        assert scans, doc
        # every row the statement read of the deliveries is one of the ten it ends
        assert all(n["Actual Rows"] * n["Actual Loops"] <= 10 for n in scans), scans


async def test_webhook_claim_token__is_held_only_by_a_pending_delivery(
    pool: Pool, hooks: Hooks
) -> None:
    # Ending a claim matches id and token alone: the database refuses a token on a finished
    # delivery, so a finished delivery can never be "ended" again by a stale claim.
    sub = await hooks.subscribe("http://127.0.0.1:9/x")
    await hooks.publish([sub])
    (row,) = await hooks.deliveries(sub)
    with pytest.raises(asyncpg.CheckViolationError):
        await pool.execute(
            "UPDATE ripple_webhook_deliveries SET status = 'delivered', next_attempt_at = NULL, "
            "claim_token = $2 WHERE id = $1",
            row["id"],
            uuid.uuid4(),
        )
