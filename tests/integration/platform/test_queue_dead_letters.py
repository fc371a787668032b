"""Dead letters live in ripple_queue_dead_letters, range-partitioned by the time they died:
moved there in the receive that kills them, retired by partition drop, redriven back,
deduplicated together with the live messages."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta

import asyncpg
import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool
from ripple.platform.core.migrate import apply_migrations, load_migrations
from ripple.platform.core.wake import NullWaker
from ripple.platform.events.fanout import PublishedEvent, SubscriptionRow
from ripple.platform.ops.sweeper import Sweeper
from ripple.subscribers.queues import queue_store
from ripple.subscribers.queues.queue import QueueKind
from ripple.subscribers.queues.queues import MessageGone, OutgoingMessage, Queues
from tests.helpers import assert_eventually, partitioned_since, throwaway_database


@pytest.fixture
def queues(pool: Pool, settings: Settings) -> Queues:
    return Queues(pool, NullWaker(settings.poll_interval), settings)


async def kill(
    queues: Queues,
    pool: Pool,
    queue: str,
    body: object,
    *,
    headers: dict[str, str] | None = None,
    deduplication_id: str | None = None,
) -> str:
    """Send one message to a queue of max_receives 1 and receive it twice: it dies; its id."""
    await queues.set_max_receives(queue, 1)
    message_id = await queues.send(queue, body, headers=headers, deduplication_id=deduplication_id)
    (got,) = await queues.receive(queue, visibility_timeout=60)
    assert got.id == message_id
    await expire(pool, queue)
    assert await queues.receive(queue) == []
    return message_id


async def expire(pool: Pool, queue: str) -> None:
    await pool.execute(
        "UPDATE ripple_queue_messages SET visible_at = now() - interval '1 second' "
        "WHERE queue = $1",
        queue,
    )


async def holder(pool: Pool, queue: str, message_id: str) -> str | None:
    found: str | None = await pool.fetchval(
        "SELECT tableoid::regclass::text FROM ripple_queue_dead_letters "
        "WHERE queue = $1 AND id = $2",
        queue,
        int(message_id),
    )
    return found


async def test_dead_letters__a_dead_letter_moves_to_the_partition_of_its_death(
    queues: Queues, pool: Pool
) -> None:
    message_id = await kill(queues, pool, "q", {"poison": True}, headers={"h": "v"})

    partition = await holder(pool, "q", message_id)
    bounds = await pool.fetchrow(
        "SELECT lower, upper FROM ripple_partitions WHERE name = $1", partition
    )
    assert bounds is not None
    assert bounds["lower"] <= datetime.now(UTC) < bounds["upper"]
    live = "SELECT count(*) FROM ripple_queue_messages WHERE queue = 'q'"
    assert await pool.fetchval(live) == 0
    (dead,) = await queues.dead_letters("q")
    assert (dead.id, dead.body, dead.headers, dead.receive_count) == (
        message_id,
        {"poison": True},
        {"h": "v"},
        1,
    )
    assert (await queues.stats("q")).dead_letters == 1
    with pytest.raises(MessageGone, match="dead letter"):
        await queues.ack("q", f"{message_id}.1")


async def test_dead_letters__redrive_moves_them_back_under_their_ids(
    queues: Queues, pool: Pool
) -> None:
    first = await kill(queues, pool, "q", {"n": 1})
    second = await kill(queues, pool, "q", {"n": 2})
    await queues.set_max_receives("q", 5)

    assert await queues.redrive("q", [second]) == 1
    (back,) = await queues.receive("q", visibility_timeout=60)
    assert (back.id, back.body, back.receive_count) == (second, {"n": 2}, 1)
    assert [d.id for d in await queues.dead_letters("q")] == [first]
    assert await holder(pool, "q", second) is None

    assert await queues.redrive("q") == 1
    assert await queues.dead_letters("q") == []
    (again,) = await queues.receive("q", visibility_timeout=60)
    assert again.id == first


async def test_dead_letters__deduplication_holds_while_a_message_is_dead(
    queues: Queues, pool: Pool
) -> None:
    dead = await kill(queues, pool, "q", {"n": 1}, deduplication_id="k")

    assert await queues.send("q", {"n": 2}, deduplication_id="k") == dead
    assert await queues.send_batch("q", [OutgoingMessage({"n": 3}, deduplication_id="k")]) == [dead]
    assert await pool.fetchval("SELECT count(*) FROM ripple_queue_messages") == 0
    assert await queues.redrive("q") == 1
    assert await queues.send("q", {"n": 4}, deduplication_id="k") == dead
    await queues.purge("q")
    assert await queues.send("q", {"n": 5}, deduplication_id="k") != dead


async def test_dead_letters__a_backfill_does_not_enqueue_an_event_whose_message_is_dead(
    queues: Queues, pool: Pool
) -> None:
    # A backfill's or replay's fan-out delivers events that may have been delivered before: it
    # probes the dead letters' keys (a publish's fan-out of the events it just wrote does not).
    kind = QueueKind(NullWaker(1.0))
    sub = SubscriptionRow("sub-1", "t.#", "queue", {"type": "queue", "queue": "q"})
    event = PublishedEvent(str(uuid.uuid4()), "t.x", {"n": 1}, datetime.now(UTC))
    async with pool.acquire() as conn:
        await kind.fan_out(conn, [(event, [sub])])
    await queues.set_max_receives("q", 1)
    assert len(await queues.receive("q", visibility_timeout=60)) == 1
    await expire(pool, "q")
    assert await queues.receive("q") == []
    assert len(await queues.dead_letters("q")) == 1

    async with pool.acquire() as conn:
        await kind.fan_out(conn, [(event, [sub])])

    assert await pool.fetchval("SELECT count(*) FROM ripple_queue_messages") == 0


async def test_dead_letters__a_send_racing_the_move_sees_the_message_once(
    queues: Queues, pool: Pool
) -> None:
    await queues.set_max_receives("q", 1)
    message_id = await queues.send("q", {"n": 1}, deduplication_id="k")
    await queues.receive("q", visibility_timeout=60)
    await expire(pool, "q")
    async with pool.acquire() as mover:
        moving = mover.transaction()
        await moving.start()
        (dying,) = await queue_store.claim_messages(mover, "q", 10, 60.0, 10)
        assert dying["dead"]
        assert await queue_store.bury(mover, "q", [int(message_id)], 10) == [int(message_id)]
        # The send starts while the move is uncommitted, and ends after it commits.
        send = asyncio.create_task(queues.send("q", {"n": 2}, deduplication_id="k"))

        async def send_waits_or_is_done() -> bool:
            if send.done():
                return True
            return bool(
                await pool.fetchval(
                    "SELECT EXISTS (SELECT 1 FROM pg_stat_activity "
                    "WHERE wait_event_type = 'Lock' AND datname = current_database())"
                )
            )

        await assert_eventually(send_waits_or_is_done)
        await moving.commit()
    assert await send == message_id
    counts = await pool.fetchval(
        "SELECT (SELECT count(*) FROM ripple_queue_messages WHERE deduplication_id = 'k') "
        "     + (SELECT count(*) FROM ripple_queue_dead_letters WHERE deduplication_id = 'k')"
    )
    assert counts == 1


async def test_dead_letters__a_message_left_marked_dying_is_moved_when_listed(
    queues: Queues, pool: Pool
) -> None:
    await queues.set_max_receives("q", 1)
    message_id = await queues.send("q", {"n": 1})
    await queues.receive("q", visibility_timeout=60)
    await expire(pool, "q")
    # The receive marks it dying; its process dies before moving it.
    async with pool.acquire() as conn:
        (dying,) = await queue_store.claim_messages(conn, "q", 10, 60.0, 10)
    assert dying["dead"]

    assert await queues.receive("q") == []
    assert (await queues.stats("q")).dead_letters == 1
    assert [d.id for d in await queues.dead_letters("q")] == [message_id]
    assert await holder(pool, "q", message_id) is not None
    assert await pool.fetchval("SELECT count(*) FROM ripple_queue_messages") == 0


async def test_dead_letters__the_sweeper_moves_one_a_dead_receiver_left_marked(
    queues: Queues, pool: Pool, settings: Settings
) -> None:
    await queues.set_max_receives("q", 1)
    old, fresh = [await queues.send("q", {"n": n}) for n in range(2)]
    await queues.receive("q", visibility_timeout=60, max_messages=2)
    await expire(pool, "q")
    # Both are marked dying by a receive whose process dies before moving them; one of them
    # a while ago.
    async with pool.acquire() as conn:
        assert len(await queue_store.claim_messages(conn, "q", 10, 60.0, 10)) == 2
    await pool.execute(
        "UPDATE ripple_queue_messages SET dead_at = now() - interval '5 minutes' WHERE id = $1",
        int(old),
    )
    sweeper = Sweeper(pool, settings, dead_letters=queue_store.DeadLetterUpkeep())

    await sweeper.sweep_once()

    assert await holder(pool, "q", old) is not None
    # the other one may still be in its receiver's hands: left for its next statement
    assert await holder(pool, "q", fresh) is None
    assert await pool.fetchval(
        "SELECT array_agg(id) FROM ripple_queue_messages WHERE dead_at IS NOT NULL"
    ) == [int(fresh)]


async def test_dead_letters__retired_by_partition_drop_after_their_own_retention(
    queues: Queues, pool: Pool, settings: Settings
) -> None:
    now = datetime.now(UTC)
    async with pool.acquire() as conn:
        await partitioned_since(conn, now - timedelta(days=30))
    for n, age in enumerate((20, 20, 10)):
        await pool.execute(
            "WITH dead AS (INSERT INTO ripple_queue_dead_letters (id, queue, body, "
            "deduplication_id, receive_count, created_at, dead_at) "
            "VALUES (nextval(pg_get_serial_sequence('ripple_queue_messages', 'id')), 'q', '{}', "
            "$2, 10, now(), now() - make_interval(days => $1)) RETURNING *) "
            "INSERT INTO ripple_queue_dead_keys (queue, deduplication_id, message_id, dead_at) "
            "SELECT queue, deduplication_id, id, dead_at FROM dead",
            age,
            f"old-{n}",
        )
    recent = await kill(queues, pool, "q", {"n": 1})
    old_partition = await pool.fetchval(
        "SELECT tableoid::regclass::text FROM ripple_queue_dead_letters "
        "WHERE dead_at < now() - interval '15 days' LIMIT 1"
    )

    result = await Sweeper(
        pool, settings.model_copy(update={"dead_letter_retention_days": 14.0})
    ).sweep_once()

    assert result["queue_dead_letters"] == 2
    assert await pool.fetchval("SELECT to_regclass($1)", old_partition) is None
    assert await pool.fetchval(
        "SELECT NOT EXISTS (SELECT 1 FROM ripple_partitions WHERE name = $1)", old_partition
    )
    assert len(await queues.dead_letters("q")) == 2  # 10 days old (kept: 14 days) and `recent`
    assert await holder(pool, "q", recent) is not None
    # the deduplication ids of the dropped dead letters are free again, the other one is not
    assert await pool.fetchval(
        "SELECT array_agg(deduplication_id ORDER BY deduplication_id) FROM ripple_queue_dead_keys"
    ) == ["old-2"]
    await queues.set_max_receives("q", 5)
    assert [await queues.send("q", {}, deduplication_id=f"old-{n}") for n in range(3)][2] == str(
        await pool.fetchval("SELECT message_id FROM ripple_queue_dead_keys")
    )
    assert await pool.fetchval("SELECT count(*) FROM ripple_queue_messages") == 2


async def test_dead_letters__a_receive_without_a_partition_for_now_creates_it(
    queues: Queues, pool: Pool
) -> None:
    async with pool.acquire() as conn:
        await partitioned_since(conn, datetime.now(UTC) - timedelta(days=3), ahead_days=0)
        current = await conn.fetchval(
            "SELECT name FROM ripple_partitions WHERE parent = 'ripple_queue_dead_letters' "
            "AND upper > now()"
        )
        await conn.execute(f"ALTER TABLE ripple_queue_dead_letters DETACH PARTITION {current}")
        await conn.execute(f"DROP TABLE {current}")
        await conn.execute("DELETE FROM ripple_partitions WHERE name = $1", current)

    message_id = await kill(queues, pool, "q", {"n": 1})

    assert [d.id for d in await queues.dead_letters("q")] == [message_id]


async def test_dead_letters__the_migration_moves_existing_dead_letters(
    pg_admin_url: str, settings: Settings
) -> None:
    async with throwaway_database(pg_admin_url, "ripple_dead_letter_migration") as url:
        pool = await asyncpg.create_pool(url, min_size=1, max_size=2)
        assert pool is not None
        try:
            await apply_migrations(pool, [m for m in load_migrations() if m.version <= 28])
            await pool.execute(
                "INSERT INTO ripple_queue_messages (queue, body, deduplication_id, receive_count, "
                "dead_at) VALUES ('q', '{\"n\": 1}', 'k', 10, now() - interval '3 days'), "
                "('q', '{\"n\": 2}', NULL, 10, now()), ('q', '{\"n\": 3}', 'live', 0, NULL)"
            )
            await apply_migrations(pool)
            assert await pool.fetchval("SELECT count(*) FROM ripple_queue_messages") == 1
            assert await pool.fetchval("SELECT count(*) FROM ripple_queue_dead_letters") == 2
        finally:
            await pool.close()
        migrated = settings.model_copy(update={"database_url": url})
        async with Client(settings=migrated) as client:
            dead = await client.queues.dead_letters("q")
            assert [d.body for d in dead] == [{"n": 1}, {"n": 2}]
            assert await client.queues.send("q", {"n": 4}, deduplication_id="k") == dead[0].id
