"""The wake layer across processes through a real redis-server that we kill and restart."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import warnings
from collections.abc import AsyncIterator

import redis

from ripple.platform.core.wake import QueueReady, RedisWaker, RunFinished, RunReady
from tests.helpers import assert_eventually
from tests.servers import RedisProcess, free_port


@contextlib.asynccontextmanager
async def _wakers(url: str, poll_interval: float) -> AsyncIterator[tuple[RedisWaker, RedisWaker]]:
    """A sender and a receiver (as in two processes), the receiver connected."""
    sender = RedisWaker(url, prefix="w:", poll_interval=poll_interval)
    receiver = RedisWaker(url, prefix="w:", poll_interval=poll_interval)
    await sender.start()
    await receiver.start()
    try:
        await asyncio.wait_for(receiver.connected.wait(), 5)
        yield sender, receiver
    finally:
        await sender.close()
        await receiver.close()


@contextlib.asynccontextmanager
async def _connected(url: str) -> AsyncIterator[tuple[RedisWaker, redis.Redis]]:
    """One connected waker (poll interval 30 s: only hints wake it) and an admin client."""
    waker = RedisWaker(url, prefix="w:", poll_interval=30)
    await waker.start()
    admin = redis.Redis.from_url(url)
    try:
        await asyncio.wait_for(waker.connected.wait(), 5)
        yield waker, admin
    finally:
        admin.close()
        await waker.close()


async def test_wake__hint_crosses_processes_fast(redis_process: RedisProcess) -> None:
    async with (
        _wakers(redis_process.url, 30) as (sender, receiver),
        receiver.listen("run:x") as listener,
    ):
        sender.notify(RunFinished(run_id="x"))
        # poll_interval is 30 s: only the hint can wake it within the wait below
        assert await asyncio.wait_for(listener.wait(10), 10) is True


async def test_wake__survives_redis_kill_and_restart(redis_process: RedisProcess) -> None:
    async with _wakers(redis_process.url, 0.2) as (sender, receiver):
        redis_process.kill()
        await assert_eventually(lambda: not receiver.connected.is_set())
        # Redis is down: a waiter still returns by the poll interval, notify never raises.
        async with receiver.listen("run:y") as listener:
            sender.notify(RunFinished(run_id="y"))
            assert await asyncio.wait_for(listener.wait(60), 2) is False
        redis_process.start()
        await asyncio.wait_for(receiver.connected.wait(), 10)

        # After reconnect, hints flow again (retry until the sender's connection is back too).
        async def delivered() -> bool:
            async with receiver.listen("run:z") as listener:
                sender.notify(RunFinished(run_id="z"))
                return await listener.wait(0.15)

        await assert_eventually(delivered, timeout=10)


async def test_wake__redis_unreachable_at_start() -> None:
    port = free_port()
    waker = RedisWaker(f"redis://127.0.0.1:{port}/0", prefix="w:", poll_interval=0.1)
    await waker.start()
    try:
        async with waker.listen("runs") as listener:
            waker.notify(RunFinished(run_id="q"))  # never raises
            assert await asyncio.wait_for(listener.wait(60), 2) is False
        assert not waker.connected.is_set()
        server = RedisProcess(port)
        server.start()
        try:
            await asyncio.wait_for(waker.connected.wait(), 10)
        finally:
            server.kill()
    finally:
        await waker.close()


async def test_wake__subscribes_only_to_channels_it_listens_on(
    redis_process: RedisProcess,
) -> None:
    async with _connected(redis_process.url) as (waker, admin):

        def subscribers(channel: str) -> int:
            return int(dict(admin.pubsub_numsub("w:" + channel))[("w:" + channel).encode()])

        assert subscribers("runs") == 0
        async with waker.listen("runs"):
            # listen() returns once Redis confirmed the subscription
            assert subscribers("runs") == 1
            assert subscribers("queue:other") == 0
        await assert_eventually(lambda: subscribers("runs") == 0)
        # Run channels (result() waiters) are one pattern, made on first use and kept.
        assert admin.pubsub_numpat() == 0
        async with waker.listen("run:r1"):
            assert admin.pubsub_numpat() == 1
        async with waker.listen("run:r2"):
            pass
        assert admin.pubsub_numpat() == 1


async def test_wake__listening_again_on_a_channel_still_receives(
    redis_process: RedisProcess,
) -> None:
    # Each exit unsubscribes and each entry subscribes again: the requests must reach Redis in
    # order, or a fast re-listen would end up unsubscribed (and fall back to polling).
    async with _wakers(redis_process.url, 30) as (sender, receiver):
        for _ in range(20):
            async with receiver.listen("queue:again") as listener:
                sender.notify(QueueReady(queue="again"))
                assert await asyncio.wait_for(listener.wait(10), 10) is True


async def test_wake__listening_again_while_the_unsubscribe_is_in_flight(
    redis_process: RedisProcess,
) -> None:
    # The last listener leaves (UNSUBSCRIBE queued or on the wire) and a new one arrives a few
    # event-loop turns later: it must end up subscribed and hear a hint published after
    # listen() returned, whatever point the UNSUBSCRIBE had reached.
    async with _connected(redis_process.url) as (waker, admin):
        for turns in range(12):
            async with waker.listen("queue:flap"):
                pass
            for _ in range(turns):
                await asyncio.sleep(0)
            async with waker.listen("queue:flap") as listener:
                admin.publish("w:queue:flap", b"another-process")
                assert await asyncio.wait_for(listener.wait(10), 10) is True, turns


async def test_wake__listen_cancelled_before_confirmation_leaves_nothing_behind(
    redis_process: RedisProcess,
) -> None:
    # E.g. an HTTP long-poll whose client went away while listen() waited for Redis.
    async with _connected(redis_process.url) as (waker, admin):

        async def wait_on(channel: str) -> None:
            async with waker.listen(channel) as listener:
                await listener.wait(5)

        for channel in ["queue:a", "queue:b", "run:r1"]:
            task = asyncio.create_task(wait_on(channel))
            await asyncio.sleep(0)  # now waiting for Redis's confirmation
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert waker._listeners == {}
        await assert_eventually(
            lambda: (
                dict(admin.pubsub_numsub("w:queue:a", "w:queue:b"))
                == {b"w:queue:a": 0, b"w:queue:b": 0}
            )
        )


async def test_wake__a_burst_of_hints_on_one_channel_is_one_message(
    redis_process: RedisProcess,
) -> None:
    # 100 starts in one go wake other processes with one message, not 100 for each to parse.
    async with _connected(redis_process.url) as (waker, admin):
        raw = admin.pubsub()
        raw.subscribe("w:runs")
        assert raw.get_message(timeout=2)["type"] == "subscribe"
        waker.notify(*(RunReady(workflow="w") for _ in range(100)))
        await assert_eventually(lambda: waker._unsent == 0)
        received = []
        while (message := raw.get_message(timeout=0.5)) is not None:
            received.append(message)
        raw.close()
        assert len(received) == 1


async def test_wake__a_hint_after_its_publisher_connection_was_closed_still_arrives(
    redis_process: RedisProcess,
) -> None:
    # The publisher keeps one connection; closed under it while idle (a Redis restart, a
    # proxy's idle timeout), the next hint goes out on a new one instead of being dropped.
    async with _wakers(redis_process.url, 30) as (sender, receiver):
        async with receiver.listen("run:a") as listener:
            sender.notify(RunFinished(run_id="a"))
            assert await asyncio.wait_for(listener.wait(10), 10) is True
        admin = redis.Redis.from_url(redis_process.url)
        try:
            # normal connections only: the receiver's subscriber connection stays
            assert admin.client_kill_filter(_type="normal", skipme=True) >= 1
        finally:
            admin.close()
        async with receiver.listen("run:b") as listener:
            sender.notify(RunFinished(run_id="b"))
            # poll_interval is 30 s: only the hint, sent again on a new connection, wakes it
            assert await asyncio.wait_for(listener.wait(10), 10) is True


async def test_wake__subscriber_connection_killed_under_subscribe_traffic_leaves_no_socket(
    redis_process: RedisProcess,
) -> None:
    """Redis drops the subscriber connection while listeners come and go: the waker replaces
    it itself, and every socket it opened is closed by `close()` (none is left to the garbage
    collector)."""
    stop = asyncio.Event()
    cycles = [0]  # listen/unlisten cycles done, over all churners

    async def churn(waker: RedisWaker, k: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            async with waker.listen(f"queue:c{k}-{n % 7}"):
                await asyncio.sleep(0)
            cycles[0] += 1
            await asyncio.sleep(0.001)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with _connected(redis_process.url) as (waker, admin):
            tasks = [asyncio.create_task(churn(waker, k)) for k in range(4)]
            try:
                for _ in range(100):
                    admin.client_kill_filter(_type="pubsub")
                    # Fault pacing, not a wait: (un)subscribes go on around each kill.
                    await asyncio.sleep(0.05)
                assert cycles[0] > 100
            finally:
                stop.set()
                await asyncio.gather(*tasks)
        gc.collect()
    leaked = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaked == []
