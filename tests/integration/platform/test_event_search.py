"""client.list_events: topic, window, payload containment, paging, and bounded plans."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool
from ripple.platform.errors import InvalidInput
from ripple.platform.events import event_store
from tests.helpers import partitioned_since


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


async def _seed_week(pool: Pool) -> None:
    """50,000 events over a week: `n` unique to each, `kind` 0 or 1 by a hash of `n` (the column's
    histogram is every 50th payload in sort order, by `n`: `i % 2` would be 0 in all of them);
    vacuumed (the payload index's pending list merged, as a busy table's is) and analyzed."""
    await pool.execute(
        "INSERT INTO ripple_events (id, topic, payload, created_at) "
        "SELECT ripple_uuid7(now() - i * interval '12 seconds'), 't' || (i % 20), "
        "jsonb_build_object('n', i, 'kind', abs(hashtext(i::text)) % 2), "
        "now() - i * interval '12 seconds' FROM generate_series(1, 50000) AS i"
    )
    await pool.execute("VACUUM ANALYZE ripple_events")


async def _explain(
    pool: Pool,
    where: dict[str, Any] | None,
    topic: str | None = None,
    *,
    since: datetime,
    until: datetime,
) -> str:
    """The plan of the search statement list_events runs for these values."""
    async with pool.acquire() as conn:
        sql, args = await event_store.search_statement(
            conn, since=since, until=until, topic=topic, where=where, after=None, limit=51
        )
        rows = await conn.fetch("EXPLAIN (COSTS OFF) " + sql, *args)
    return "\n".join(r[0] for r in rows)


async def _plan(pool: Pool, where: dict[str, object], topic: str | None = None) -> str:
    now = datetime.now(UTC)
    plan = await _explain(pool, where, topic, since=now - timedelta(days=1), until=now)
    # The table is partitioned by id: the partitions holding events are read through an index
    # (the empty ones created ahead cost nothing to scan whole).
    populated = [
        r[0]
        for r in await pool.fetch("SELECT DISTINCT tableoid::regclass::text FROM ripple_events")
    ]
    assert populated
    assert not [p for p in populated if f"Seq Scan on {p} " in plan], plan
    return plan


async def test_list_events__a_common_value_walks_a_time_index_to_the_limit(
    client: Client,
) -> None:
    await _seed_week(client.pool)
    # Either time index (of the partitions the window's ids fall in) bounds the scan to the
    # window (with a topic the planner may take the plain one and filter the topic).
    index = r"ripple_events_\S*created\S*"
    for topic in (None, "t7"):
        plan = await _plan(client.pool, {"kind": 1}, topic)
        assert re.search(rf"Index Scan (Backward )?using {index} ", plan), plan
        assert not re.search(r"ripple_events_\S*payload", plan), plan
        assert plan.startswith("Limit"), plan


async def test_list_events__a_rare_value_reads_the_payload_index(client: Client) -> None:
    await _seed_week(client.pool)
    # Published after ANALYZE: the statistics cannot have seen it (nor the absent one).
    ids = {
        (await client.publish(topic, {"order": "rare", "n": -i})).event_id
        for i, topic in enumerate(["t3", "t3", "t4"])
    }
    cases: list[tuple[dict[str, object], str | None]] = [
        ({"order": "rare"}, None),
        ({"order": "rare"}, "t3"),
        ({"n": -7}, None),
    ]
    for where, topic in cases:
        plan = await _plan(client.pool, where, topic)
        # the payload index of a partition the window's ids fall in
        assert re.search(r"Bitmap Index Scan on ripple_events_\S*payload", plan), plan
    since = datetime.now(UTC) - timedelta(days=1)
    found = await client.list_events(where={"order": "rare"}, since=since)
    assert {e.event_id for e in found.items} == ids
    assert len((await client.list_events(topic="t3", where={"order": "rare"})).items) == 2


async def test_list_events__a_window_reads_only_the_partitions_it_spans(client: Client) -> None:
    now = datetime.now(UTC)
    async with client.pool.acquire() as conn:
        await partitioned_since(conn, now - timedelta(days=10))
    await client.pool.execute(
        "INSERT INTO ripple_events (id, topic, payload, created_at) "
        "SELECT ripple_uuid7(t), 't', jsonb_build_object('n', i), t "
        "FROM generate_series(1, 240) AS i, LATERAL (SELECT now() - i * interval '1 hour') AS w(t)"
    )
    since, until = now - timedelta(days=5, hours=12), now - timedelta(days=4, hours=12)
    spanned = {
        r["name"]
        for r in await client.pool.fetch(
            "SELECT name FROM ripple_partitions WHERE parent = 'ripple_events' "
            "AND upper > $1 AND lower < $2",
            since - event_store.ID_TIME_MARGIN,
            until + event_store.ID_TIME_MARGIN,
        )
    }
    assert 1 <= len(spanned) <= 2

    cases: list[tuple[dict[str, Any] | None, str | None]] = [
        (None, None),
        ({"n": 100}, None),
        (None, "t"),
    ]
    for where, topic in cases:
        plan = await _explain(client.pool, where, topic, since=since, until=until)
        scanned = set(re.findall(r"\bon (ripple_events_\w+) ripple_events", plan))
        assert scanned == spanned, plan

    page = await client.list_events(since=since, until=until, limit=100)
    assert len(page.items) == 24
    assert all(since <= e.published_at < until for e in page.items)


async def test_list_events__each_search_is_planned_for_its_values(settings: Settings) -> None:
    # One connection, so every search runs the same prepared statement: after five the plan
    # cache would settle on a generic plan, which cannot use the payload index.
    async with Client(settings=settings.model_copy(update={"pool_max_size": 1})) as client:
        await _seed_week(client.pool)
        since = datetime.now(UTC) - timedelta(days=7)
        for n in range(1, 11):
            page = await client.list_events(where={"n": n * 1000}, since=since)
            assert [e.payload["n"] for e in page.items] == [n * 1000]
        counts = await client.pool.fetchrow(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1",
            event_store.SEARCH_EVENTS,
        )
    assert counts is not None
    assert (counts["generic_plans"], counts["custom_plans"]) == (0, 10)
