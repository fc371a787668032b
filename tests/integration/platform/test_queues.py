"""Durable queues: send/receive/ack, visibility, fenced receipts, dead letters, FIFO, long-poll."""

from __future__ import annotations

import asyncio
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool
from ripple.platform.core.wake import AnyHint, NullWaker, RedisWaker
from ripple.platform.errors import InvalidInput
from ripple.subscribers.queues import queue_store
from ripple.subscribers.queues.queues import MessageGone, OutgoingMessage, Queues, StaleReceipt
from tests.helpers import assert_eventually


@pytest.fixture
def queues(pool: Pool, settings: Settings) -> Queues:
    return Queues(pool, NullWaker(settings.poll_interval), settings)


class CommitAwareWaker(NullWaker):
    """Records, for every hint sent, whether the sender's transaction had committed yet."""

    def __init__(self) -> None:
        super().__init__(30.0)
        self.committed = False
        self.hints: list[bool] = []

    def notify(self, *hints: AnyHint) -> None:
        self.hints.extend(self.committed for _ in hints)
        super().notify(*hints)


async def test_queue__send_batch_in_a_callers_transaction_hints_after_its_commit(
    pool: Pool, settings: Settings
) -> None:
    waker = CommitAwareWaker()
    queues = Queues(pool, waker, settings)
    async with pool.acquire() as conn, conn.transaction():
        await queues.send_batch("q", [{"n": 1}], conn=conn)
    waker.committed = True
    # Receivers woken before the commit found nothing; a hint follows the commit.
    await assert_eventually(lambda: True in waker.hints)


async def expire_all(pool: Pool, queue: str) -> None:
    """Move time: every in-flight message's visibility timeout has passed."""
    await pool.execute(
        "UPDATE ripple_queue_messages SET visible_at = now() - interval '1 second'"
        " WHERE queue = $1 AND dead_at IS NULL",
        queue,
    )


async def test_queue__send_receive_ack(queues: Queues) -> None:
    first = await queues.send("q", {"n": 1}, headers={"h": "v"})
    await queues.send_batch("q", [{"n": 2}, OutgoingMessage({"n": 3})])
    got = await queues.receive("q", max_messages=2, visibility_timeout=30)
    assert [m.body for m in got] == [{"n": 1}, {"n": 2}]
    assert got[0].id == first
    assert got[0].headers == {"h": "v"}
    assert got[1].headers == {}
    assert got[0].receive_count == 1
    stats = await queues.stats("q")
    assert (stats.visible, stats.in_flight, stats.dead_letters, stats.depth) == (1, 2, 0, 3)
    await queues.ack("q", got[0].receipt)
    assert await queues.ack_batch("q", [got[1].receipt]) == [got[1].receipt]
    rest = await queues.receive("q", max_messages=10)
    assert [m.body for m in rest] == [{"n": 3}]
    assert await queues.receive("q") == []
    assert await queues.purge("q") == 1
    assert (await queues.stats("q")).depth == 0


async def test_queue__deduplication_id(queues: Queues) -> None:
    a = await queues.send("q", {"n": 1}, deduplication_id="d1")
    b = await queues.send("q", {"n": 2}, deduplication_id="d1")
    assert a == b
    assert len(await queues.receive("q", max_messages=10)) == 1


async def test_queue__visibility_timeout_redelivers_and_fences_receipt(
    queues: Queues, pool: Pool
) -> None:
    await queues.send("q", {"n": 1})
    (first,) = await queues.receive("q", visibility_timeout=60)
    assert await queues.receive("q") == []  # invisible while in flight
    await expire_all(pool, "q")
    (second,) = await queues.receive("q", visibility_timeout=60)
    assert second.id == first.id
    assert second.receive_count == 2
    with pytest.raises(StaleReceipt, match="stale"):
        await queues.ack("q", first.receipt)
    with pytest.raises(StaleReceipt):
        await queues.extend("q", first.receipt, 60)
    assert await queues.ack_batch("q", [first.receipt]) == []
    await queues.ack("q", second.receipt)
    with pytest.raises(MessageGone, match="no longer exists"):
        await queues.ack("q", second.receipt)
    with pytest.raises(InvalidInput, match="not a receipt"):
        await queues.ack("q", "garbage")
    # ack_batch checks all receipts at once: two receipts in one string are still one bad one.
    bad_batches: list[list[Any]] = [
        [second.receipt, f"{second.receipt},{second.receipt}"],
        [second.receipt, 7],
    ]
    for bad in bad_batches:
        with pytest.raises(InvalidInput, match="not a receipt"):
            await queues.ack_batch("q", bad)


async def test_queue__nack_and_extend(queues: Queues, pool: Pool) -> None:
    await queues.send("q", {"n": 1})
    (msg,) = await queues.receive("q", visibility_timeout=60)
    await queues.nack("q", msg.receipt)
    (again,) = await queues.receive("q", visibility_timeout=1)
    assert again.receive_count == 2
    await queues.nack("q", again.receipt, delay=3600)
    assert await queues.receive("q") == []
    await expire_all(pool, "q")
    (third,) = await queues.receive("q", visibility_timeout=1)
    await queues.extend("q", third.receipt, 3600)
    assert (await queues.stats("q")).in_flight == 1


async def test_queue__delayed_send(queues: Queues, pool: Pool) -> None:
    await queues.send("q", {"n": 1}, delay=3600)
    assert await queues.receive("q") == []
    assert (await queues.stats("q")).delayed == 1
    await expire_all(pool, "q")
    assert len(await queues.receive("q")) == 1


async def test_queue__dead_letters_and_redrive(queues: Queues, pool: Pool) -> None:
    await queues.set_max_receives("q", 2)
    await queues.send("q", {"poison": True})
    await queues.send("q", {"fine": True})
    for _ in range(2):
        got = await queues.receive("q", max_messages=10, visibility_timeout=60)
        for m in got:
            if m.body == {"fine": True}:
                await queues.ack("q", m.receipt)
        await expire_all(pool, "q")
    assert await queues.receive("q", max_messages=10) == []
    dead = await queues.dead_letters("q")
    assert [(d.body, d.receive_count) for d in dead] == [({"poison": True}, 2)]
    assert (await queues.stats("q")).dead_letters == 1
    assert await queues.redrive("q", [dead[0].id]) == 1
    (back,) = await queues.receive("q")
    assert (back.body, back.receive_count) == ({"poison": True}, 1)
    assert await queues.dead_letters("q") == []


async def test_queue__default_max_receives_is_ten(queues: Queues, pool: Pool) -> None:
    await queues.send("q", {"n": 1})
    for attempt in range(1, 11):
        (msg,) = await queues.receive("q", visibility_timeout=60)
        assert msg.receive_count == attempt
        await expire_all(pool, "q")
    assert await queues.receive("q") == []
    assert len(await queues.dead_letters("q")) == 1


async def test_queue__fifo_groups_in_order_single_flight_under_4_consumers(
    queues: Queues,
) -> None:
    groups = ["g0", "g1", "g2", "g3", "g4"]
    per_group = 40
    for i in range(per_group):
        await queues.send_batch(
            "fifo", [OutgoingMessage({"g": g, "i": i}, group_id=g) for g in groups]
        )
    seen: dict[str, list[int]] = defaultdict(list)
    in_flight: dict[str, int] = defaultdict(int)
    violations: list[str] = []
    total = len(groups) * per_group

    async def consumer() -> None:
        while sum(len(v) for v in seen.values()) < total:
            got = await queues.receive("fifo", max_messages=3, visibility_timeout=60)
            for m in got:
                in_flight[m.group_id or ""] += 1
                if in_flight[m.group_id or ""] > 1:
                    violations.append(f"two in flight in {m.group_id}")
            await asyncio.sleep(0)  # let other consumers run while these are held
            for m in got:
                seen[m.body["g"]].append(m.body["i"])
                in_flight[m.group_id or ""] -= 1
                await queues.ack("fifo", m.receipt)
            if not got:
                await asyncio.sleep(0.005)

    await asyncio.wait_for(asyncio.gather(*(consumer() for _ in range(4))), 60)
    assert violations == []
    for g in groups:
        assert seen[g] == list(range(per_group)), g


async def test_queue__long_poll_woken_by_send(pool: Pool, settings: Settings) -> None:
    # A poll interval far beyond the test's patience: only the wake hint can end the wait.
    queues = Queues(pool, NullWaker(poll_interval=300), settings)
    receiver = asyncio.create_task(queues.receive("lp", wait=120))
    await asyncio.sleep(0.05)
    assert not receiver.done()
    await queues.send("lp", {"hello": 1})
    got = await asyncio.wait_for(receiver, 20)
    assert [m.body for m in got] == [{"hello": 1}]


async def test_queue__long_poll_returns_empty_after_wait(queues: Queues) -> None:
    assert await queues.receive("empty", wait=0.3) == []


async def test_queue__redis_down_still_delivers(pool: Pool, settings: Settings) -> None:
    # Redis at a closed port: hints are lost; receivers still notice by polling Postgres.
    waker_a = RedisWaker("redis://127.0.0.1:1/0", poll_interval=0.2)
    waker_b = RedisWaker("redis://127.0.0.1:1/0", poll_interval=0.2)
    await waker_a.start()
    await waker_b.start()
    try:
        receiver_side = Queues(pool, waker_a, settings)
        sender_side = Queues(pool, waker_b, settings)
        receiver = asyncio.create_task(receiver_side.receive("down", wait=30))
        await sender_side.send("down", {"n": 1})
        got = await asyncio.wait_for(receiver, 20)
        assert [m.body for m in got] == [{"n": 1}]
        await receiver_side.ack("down", got[0].receipt)
    finally:
        await waker_a.close()
        await waker_b.close()


async def test_queue__validation(queues: Queues) -> None:
    with pytest.raises(InvalidInput, match="queue name"):
        await queues.send("bad name", {})
    with pytest.raises(InvalidInput, match="max_messages"):
        await queues.receive("q", max_messages=0)
    with pytest.raises(InvalidInput, match="visibility_timeout"):
        await queues.receive("q", visibility_timeout=-1)
    with pytest.raises(InvalidInput, match="not None"):
        await queues.send("q", None)


async def test_queue__send_batch_names_the_failing_message_and_writes_nothing(
    queues: Queues, settings: Settings
) -> None:
    ok: dict[str, Any] = {"n": 1}
    too_deep: Any = 1
    for _ in range(settings.max_json_depth + 1):
        too_deep = [too_deep]
    cases: list[tuple[list[Any], str]] = [
        ([ok, {1: "x"}], "message 1 of the batch: body has a non-string object key 1"),
        ([ok, [{"a": {None: 1}}]], "message 1 of the batch: body has a non-string object key"),
        ([ok, ok, {"s": "a\x00"}], "message 2 of the batch: body contains the NUL character"),
        ([None, ok], "message 0 of the batch: body must be JSON, not None"),
        (
            [ok, too_deep],
            f"message 1 of the batch: body nests deeper than {settings.max_json_depth}",
        ),
        ([ok, "x" * settings.max_body_bytes], "message 1 of the batch: body is"),
        ([ok, float("nan")], "message 1 of the batch: body is not JSON"),
        (
            [ok, OutgoingMessage(ok, headers={"h": {2: 1}})],
            "message 1 of the batch: headers has a non-string object key 2",
        ),
    ]
    for messages, error in cases:
        with pytest.raises(InvalidInput, match=re.escape(error)):
            await queues.send_batch("q", messages)
    with pytest.raises(InvalidInput, match=r"^body has a non-string object key 1$"):
        await queues.send("q", {1: "x"})  # one message: no index to name
    assert (await queues.stats("q")).depth == 0
    # Whatever passes is stored as sent: brackets and escapes inside strings are not nesting.
    at_limit: Any = {"s": "]]}}[[{", "e": '\\"[', "é": [1.5, True, None]}
    for _ in range(settings.max_json_depth - 2):  # the dict and its list: 2 levels
        at_limit = [at_limit]
    bodies = [at_limit, ok, "plain", 7]
    ids = await queues.send_batch("q", bodies)
    got = await queues.receive("q", max_messages=10)
    assert [(m.id, m.body) for m in got] == list(zip(ids, bodies, strict=True))


def walk(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from walk(child)


async def test_queue__claim_uses_partial_index(pool: Pool, queues: Queues) -> None:
    for start in range(0, 5000, 1000):
        await queues.send_batch("busy", [{"i": i} for i in range(start, start + 1000)])
    await queues.send_batch("other", [{"i": i} for i in range(1000)])
    await pool.execute("ANALYZE ripple_queue_messages")
    async with pool.acquire() as conn:
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) " + queue_store.CLAIM_MESSAGES, "busy", 100, 30.0, 10
        )
    plan = json.loads(plan) if isinstance(plan, str) else plan
    nodes = list(walk(plan[0]["Plan"]))
    scans = {(n["Node Type"], n.get("Index Name")) for n in nodes if n.get("Relation Name")}
    assert ("Index Scan", "ripple_queue_messages_ready") in scans
    assert not [
        n
        for n in nodes
        if n["Node Type"] == "Seq Scan" and n.get("Relation Name") == "ripple_queue_messages"
    ]
    assert "SKIP LOCKED" in queue_store.CLAIM_MESSAGES
