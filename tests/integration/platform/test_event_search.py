"""client.list_events: topic, window, payload containment, paging, and bounded plans."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from ripple.platform.client import Client
from ripple.platform.errors import InvalidInput
from ripple.platform.events import event_store


async def _publish(client: Client) -> dict[str, str]:
    ids = {}
    for label, topic, payload in [
        ("a", "order.paid", {"customerId": 42, "amount": 10, "tags": ["vip", "eu"]}),
        ("b", "order.paid", {"customerId": 7, "amount": 99}),
        ("c", "order.refunded", {"customerId": 42, "nested": {"region": "eu"}}),
        ("d", "user.signup", {"userId": 1}),
    ]:
        ids[label] = (await client.publish(topic, payload)).event_id
    return ids


async def test_list_events__by_topic_and_payload_containment(client: Client) -> None:
    ids = await _publish(client)
    label = {v: k for k, v in ids.items()}

    async def found(**kw: object) -> list[str]:
        page = await client.list_events(**kw)  # type: ignore[arg-type]
        return [label[e.event_id] for e in page.items if e.event_id in label]

    assert await found() == ["d", "c", "b", "a"]  # newest first
    assert await found(topic="order.paid") == ["b", "a"]
    assert await found(where={"customerId": 42}) == ["c", "a"]
    assert await found(topic="order.paid", where={"customerId": 42}) == ["a"]
    assert await found(where={"tags": ["eu"]}) == ["a"]
    assert await found(where={"nested": {"region": "eu"}}) == ["c"]
    assert await found(where={"customerId": "42"}) == []  # types matter
    page = await client.list_events(topic="order.paid", where={"customerId": 42})
    [event] = page.items
    assert (event.topic, event.payload["amount"]) == ("order.paid", 10)
    assert event.published_at.tzinfo is not None


async def test_list_events__window_and_pages(client: Client) -> None:
    ids = await _publish(client)
    now = datetime.now(UTC)
    old = await client.list_events(until=now - timedelta(hours=1))
    assert old.items == []
    seen: list[str] = []
    cursor = None
    while True:
        page = await client.list_events(limit=1, cursor=cursor, since=now - timedelta(hours=1))
        seen += [e.event_id for e in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [ids[k] for k in "dcba"]


@pytest.mark.parametrize(
    "kw",
    [
        {"where": [1, 2]},
        {"since": datetime(2020, 1, 1, tzinfo=UTC)},  # a window longer than 31 days
        {"since": datetime.now(UTC), "until": datetime.now(UTC) - timedelta(hours=1)},
        {"limit": 0},
        {"cursor": "not-a-cursor"},
    ],
)
async def test_list_events__unbounded_or_bad_queries_are_refused(
    client: Client, kw: dict[str, object]
) -> None:
    with pytest.raises(InvalidInput):
        await client.list_events(**kw)  # type: ignore[arg-type]


async def test_list_events__plans_walk_a_time_index_with_a_limit(client: Client) -> None:
    pool = client.pool
    await pool.execute(
        "INSERT INTO ripple_events (id, topic, payload, created_at) "
        "SELECT gen_random_uuid(), 't' || (i % 20), jsonb_build_object('n', i), "
        "now() - i * interval '12 seconds' FROM generate_series(1, 50000) AS i"
    )
    await pool.execute("ANALYZE ripple_events")
    now = datetime.now(UTC)
    args = [now - timedelta(days=1), now, {"n": 7}, None, None, 51]
    # Either time index bounds the scan to the window (with a topic the planner may take
    # the plain one and filter the topic).
    index = "ripple_events_(topic_)?created"
    for sql, extra in [(event_store.SEARCH_EVENTS, []), (event_store.SEARCH_TOPIC_EVENTS, ["t7"])]:
        rows = await pool.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, *args, *extra)
        plan = "\n".join(r[0] for r in rows)
        assert "Seq Scan" not in plan, plan
        assert re.search(rf"Index Scan (Backward )?using {index} ", plan), plan
        assert plan.startswith("Limit"), plan
