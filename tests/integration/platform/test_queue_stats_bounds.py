"""Queue stats and the queue gauges read a bounded number of index entries per kind of message,
so `GET /v1/queues/{q}/stats` and a metrics scrape cost the same with a backlog of any size;
counts that reach the cap are reported as lower bounds."""

from __future__ import annotations

import re

import pytest

from ripple.platform.client import Client
from ripple.platform.ops import observability_store
from ripple.subscribers.queues import queue_store
from tests.helpers import rest_client

BACKLOG = 60_000
CAP = 50


async def _fill(client: Client) -> None:
    """A deep queue: visible, delayed and received ungrouped messages, FIFO groups, dead
    letters; and a small queue beside it."""
    await client.pool.execute(
        "INSERT INTO ripple_queue_messages (queue, body, visible_at, receive_count) "
        "SELECT 'deep', '{}'::jsonb, now() + (i % 3 - 1) * interval '1 hour', "
        "       CASE WHEN i % 3 = 2 AND i % 2 = 0 THEN 1 ELSE 0 END "
        "FROM generate_series(1, $1) AS i",
        BACKLOG,
    )
    await client.pool.execute(
        "INSERT INTO ripple_queue_messages (queue, body, group_id) "
        "SELECT 'deep', '{}'::jsonb, 'g' || (i % 10) FROM generate_series(1, $1) AS i",
        BACKLOG // 10,
    )
    await client.pool.execute(
        "INSERT INTO ripple_queue_dead_letters (id, queue, body, receive_count, created_at) "
        "SELECT -i, 'deep', '{}'::jsonb, 10, now() FROM generate_series(1, $1) AS i",
        BACKLOG // 10,
    )
    await client.queues.send("small", {"n": 1})
    await client.queues.send("small", {"n": 2}, delay=3600)


def _buffers(plan: str) -> int:
    """Shared buffers the whole statement touched (the top node's count)."""
    found = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
    assert found is not None, plan
    return int(found.group(1)) + int(found.group(2) or 0)


async def _plan(client: Client, sql: str, *args: object) -> str:
    rows = await client.pool.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, *args)
    return "\n".join(r[0] for r in rows)


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "analyzed"])
async def test_queue_stats_and_gauges__read_bounded_samples_through_the_indexes(
    client: Client, analyzed: bool
) -> None:
    await _fill(client)
    if analyzed:
        await client.pool.execute("ANALYZE ripple_queue_messages")
    stats_plan = await _plan(client, queue_store.STATS, "deep", CAP)
    gauges_plan = await _plan(client, observability_store.SELECT_QUEUE_GAUGES, CAP, 100)
    for plan in (stats_plan, gauges_plan):
        assert "Seq Scan on ripple_queue_messages" not in plan, plan
        # 72,000 messages fill about a thousand pages; samples of 50 per kind touch a few
        # dozen buffers (index pages and the sampled rows), whatever the backlog.
        assert _buffers(plan) < 300, plan


async def test_queue_stats__counts_that_reach_the_cap_are_lower_bounds(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    await _fill(client)
    exact = await client.queues.stats("small")
    assert (exact.visible, exact.delayed, exact.in_flight, exact.dead_letters) == (1, 1, 0, 0)
    assert exact.lower_bounds == frozenset()
    assert exact.count_cap == queue_store.STATS_CAP

    monkeypatch.setattr(queue_store, "STATS_CAP", CAP)
    deep = await client.queues.stats("deep")
    assert deep.lower_bounds == {"visible", "in_flight", "delayed", "dead_letters", "depth"}
    assert deep.visible >= CAP
    assert deep.in_flight + deep.delayed >= CAP
    assert deep.dead_letters == CAP
    assert deep.depth <= 3 * CAP  # bounded samples, not the 66,000 live messages
    assert deep.oldest_age >= 0
    small = await client.queues.stats("small")
    assert small.lower_bounds == frozenset()
    assert (small.visible, small.delayed) == (1, 1)

    async with rest_client(client) as http:
        body = (await http.get("/v1/queues/deep/stats")).json()
        assert body["lowerBounds"] == ["deadLetters", "delayed", "depth", "inFlight", "visible"]
        assert body["countCap"] == CAP
        assert body["deadLetters"] == CAP
        assert body["depth"] == body["visible"] + body["inFlight"] + body["delayed"]
        small_body = (await http.get("/v1/queues/small/stats")).json()
        assert small_body["lowerBounds"] == []
        assert (small_body["visible"], small_body["delayed"], small_body["depth"]) == (1, 1, 2)


async def test_queue_gauges__depth_counts_each_kind_up_to_the_cap(client: Client) -> None:
    await _fill(client)
    await client.queues.set_max_receives("configured-only", 3)
    async with client.pool.acquire() as conn:
        gauges = {g.queue: g for g in await observability_store.select_queue_gauges(conn, CAP)}
        whole = {g.queue: g for g in await observability_store.select_queue_gauges(conn)}
        first = await observability_store.select_queue_gauges(conn, CAP, 1)
    assert set(gauges) == {"configured-only", "deep", "small"}
    assert gauges["deep"].depth == 2 * CAP  # ungrouped and grouped, each at the cap
    assert whole["deep"].depth == observability_store.QUEUE_GAUGE_CAP + BACKLOG // 10
    assert (gauges["small"].depth, whole["small"].depth) == (2, 2)
    assert gauges["configured-only"].depth == 0
    assert gauges["deep"].oldest_age >= 0
    assert [g.queue for g in first] == ["configured-only"]
