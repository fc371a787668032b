"""Fair receive: a round robin across message groups, FIFO within each, so no group starves."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict

import httpx
import pytest

from ripple.platform.cli.direct import ClientOperator
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool
from ripple.platform.core.wake import NullWaker
from ripple.subscribers.queues import queue_store
from ripple.subscribers.queues.queues import Message, OutgoingMessage, Queues

SMALL = [f"small-{i}" for i in range(5)]


@pytest.fixture
def queues(pool: Pool, settings: Settings) -> Queues:
    return Queues(pool, NullWaker(settings.poll_interval), settings)


async def send(queues: Queues, group: str | None, count: int, start: int = 0) -> None:
    for first in range(start, start + count, 1000):
        batch = [
            OutgoingMessage({"group": group, "n": n}, group_id=group)
            for n in range(first, min(first + 1000, start + count))
        ]
        await queues.send_batch("q", batch)


async def drain(queues: Queues, batches: int, *, fair: bool) -> list[list[Message]]:
    """Receive and ack `batches` batches of 10."""
    out = []
    for _ in range(batches):
        got = await queues.receive("q", max_messages=10, fair=fair)
        out.append(got)
        if got:
            await queues.ack_batch("q", [m.receipt for m in got])
    return out


async def test_fair_receive__a_big_group_does_not_starve_small_ones(queues: Queues) -> None:
    await send(queues, "big", 3000)
    for group in SMALL:
        await send(queues, group, 3)

    batches = await drain(queues, 2, fair=True)

    # Every group is in the first batch, the big one takes a turn like the others (two of six
    # lanes get a second turn in a batch of ten), and the small groups' messages are all out
    # within two batches, each group in order.
    assert {m.group_id for m in batches[0]} == {"big", *SMALL}
    assert sum(m.group_id == "big" for m in batches[0]) == 2
    seen: dict[str | None, list[int]] = defaultdict(list)
    for batch in batches:
        assert len(batch) == 10
        for m in batch:
            seen[m.group_id].append(m.body["n"])
    for group in SMALL:
        assert seen[group] == [0, 1, 2]
    assert seen["big"] == list(range(len(seen["big"])))


async def test_fair_receive__ungrouped_backlog_is_one_lane_where_plain_receive_starves_groups(
    queues: Queues,
) -> None:
    await send(queues, None, 2000)
    for group in SMALL:
        await send(queues, group, 2)

    plain = await queues.receive("q", max_messages=10)
    assert {m.group_id for m in plain} == {None}  # the plain receive: ungrouped first
    await queues.ack_batch("q", [m.receipt for m in plain])

    fair = await queues.receive("q", max_messages=10, fair=True)
    assert [m.group_id for m in fair[:6]].count(None) == 1  # one turn each, ungrouped too
    assert {m.group_id for m in fair} == {None, *SMALL}


async def test_fair_receive__a_group_gives_a_run_from_its_head_then_waits_for_its_acks(
    queues: Queues,
) -> None:
    await send(queues, "g", 5)
    first = await queues.receive("q", max_messages=3, fair=True)
    assert [m.body["n"] for m in first] == [0, 1, 2]
    # In flight: the group gives nothing more, even with its head acked first.
    assert await queues.receive("q", max_messages=10, fair=True) == []
    await queues.ack("q", first[0].receipt)
    assert await queues.receive("q", max_messages=10, fair=True) == []
    await queues.ack_batch("q", [m.receipt for m in first[1:]])
    rest = await queues.receive("q", max_messages=10, fair=True)
    assert [m.body["n"] for m in rest] == [3, 4]
    # A message visible again is its group's head: it comes alone, before those behind it.
    await queues.nack("q", rest[0].receipt)
    again = await queues.receive("q", max_messages=10, fair=True)
    assert [m.body["n"] for m in again] == [3]


async def test_fair_receive__concurrent_receivers_never_share_or_reorder_a_group(
    queues: Queues,
) -> None:
    for group in ("a", "b", "c"):
        await send(queues, group, 40)
    taken: list[Message] = []

    async def receiver() -> None:
        while True:
            got = await queues.receive("q", max_messages=7, fair=True)
            if not got:
                if len(taken) >= 120:
                    return
                await asyncio.sleep(0)
                continue
            taken.extend(got)
            # acked in order, so each group's next run starts right after this one
            await queues.ack_batch("q", [m.receipt for m in got])

    await asyncio.wait_for(asyncio.gather(*(receiver() for _ in range(4))), 20)
    assert len(taken) == 120
    assert len({m.id for m in taken}) == 120
    by_group: dict[str | None, list[int]] = defaultdict(list)
    for m in taken:
        by_group[m.group_id].append(m.body["n"])
    for group in ("a", "b", "c"):
        assert by_group[group] == list(range(40))  # in order: each run starts after the last


async def test_fair_receive__over_rest_and_the_cli_operator(
    client: Client, http: httpx.AsyncClient
) -> None:
    await send(client.queues, None, 50)
    for group in SMALL:
        await send(client.queues, group, 1)
    response = await http.post(
        "/v1/queues/q/messages/receive", json={"maxMessages": 6, "fair": True}
    )
    assert response.status_code == 200, response.text
    groups = {m.get("groupId") for m in response.json()["messages"]}
    assert groups == {None, *SMALL}
    again = await ClientOperator(client).queue_receive("q", 3, 30.0, 0.0, False, True)
    assert {m.get("groupId") for m in again} == {None}  # every group is in flight


async def test_fair_receive__reads_per_group_not_the_backlog(queues: Queues, pool: Pool) -> None:
    # A group of 5,000 beside three small ones: the statement reads a few index entries per
    # group (skipping through the group index, then at most max_messages each), never the
    # big group's backlog.
    await send(queues, "big", 5000)
    for group in ("a", "b", "c"):
        await send(queues, group, 2)
    await pool.execute("ANALYZE ripple_queue_messages")
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            plan = await conn.fetchval(
                "EXPLAIN (ANALYZE, FORMAT JSON) " + queue_store.CLAIM_FAIR, "q", 10, 30.0, 10
            )
        finally:
            await tx.rollback()
    doc = json.loads(plan) if isinstance(plan, str) else plan
    read = 0
    stack = [doc[0]["Plan"]]
    while stack:
        node = stack.pop()
        stack.extend(node.get("Plans", []))
        if node.get("Relation Name") == "ripple_queue_messages" and "Scan" in node["Node Type"]:
            read += node["Actual Rows"] * node["Actual Loops"] + node.get(
                "Rows Removed by Filter", 0
            )
    assert read < 200, read
