"""The wake layer and the rate limits on a Redis that Sentinel manages: hints cross processes
through the master Sentinel names, and after the master is killed and the replica promoted,
they flow again through the new master; closing either releases every socket it opened."""

from __future__ import annotations

import asyncio
import contextlib
import os
from datetime import timedelta

import pytest

from ripple.platform.access.rate_limits import RateLimiter
from ripple.platform.core.config import load_settings
from ripple.platform.core.limits import RateLimit
from ripple.platform.core.wake import RedisConnector, RedisEndpoint, RedisWaker, RunFinished
from ripple.platform.errors import ConfigError
from tests.helpers import assert_eventually
from tests.servers import RedisSentinelSet

pytestmark = pytest.mark.timeout(90)


def _endpoint(servers: RedisSentinelSet) -> RedisEndpoint:
    settings = load_settings(
        redis_sentinels=servers.addresses, redis_sentinel_master=servers.MASTER
    )
    return settings.redis_endpoint()


def _sockets() -> set[str]:
    """The sockets this process has open (as `socket:[inode]`)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the directory's own descriptor is gone by now
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:"):
                found.add(target)
    return found


async def test_wake_sentinel__hints_follow_a_master_failover(sentinels: RedisSentinelSet) -> None:
    endpoint = _endpoint(sentinels)
    sender = RedisWaker(endpoint, prefix="s:", poll_interval=30)
    receiver = RedisWaker(endpoint, prefix="s:", poll_interval=30)
    await sender.start()
    await receiver.start()
    try:
        await asyncio.wait_for(receiver.connected.wait(), 10)
        async with receiver.listen("run:x") as listener:
            sender.notify(RunFinished(run_id="x"))
            # the poll interval is 30 s: only a hint wakes the listener this soon
            assert await asyncio.wait_for(listener.wait(10), 10) is True

            sentinels.kill_master()
            await asyncio.to_thread(sentinels.wait_failover)

            async def hinted() -> bool:
                # Hints sent while the wakers reconnect are lost (by design: waiters poll);
                # once both are on the new master, one gets through.
                sender.notify(RunFinished(run_id="x"))
                return await listener.wait(0.5)

            await assert_eventually(hinted, timeout=30, interval=0.05)
        # both now talk to the promoted replica
        assert receiver.connected.is_set()
    finally:
        await sender.close()
        await receiver.close()


async def test_wake_sentinel__a_demoted_master_is_left(sentinels: RedisSentinelSet) -> None:
    """A failover that keeps the old master alive (it becomes a replica): the sender moves to
    the new master, so a process that connected after the failover gets its hints."""
    import redis

    endpoint = _endpoint(sentinels)
    sender = RedisWaker(endpoint, prefix="d:", poll_interval=30)
    await sender.start()
    late = RedisWaker(endpoint, prefix="d:", poll_interval=30)
    try:
        sender.notify(RunFinished(run_id="warm-up"))  # the publisher connects to the old master
        with redis.Redis(port=sentinels.sentinel_ports[0]) as admin:
            admin.execute_command("SENTINEL", "FAILOVER", sentinels.MASTER)
        await asyncio.to_thread(sentinels.wait_failover)
        await late.start()
        await asyncio.wait_for(late.connected.wait(), 10)
        async with late.listen("run:y") as listener:

            async def hinted() -> bool:
                sender.notify(RunFinished(run_id="y"))
                return await listener.wait(0.5)

            await assert_eventually(hinted, timeout=30, interval=0.05)
    finally:
        await sender.close()
        await late.close()


async def test_wake_sentinel__a_connection_to_another_server_is_stale(
    sentinels: RedisSentinelSet,
) -> None:
    """A demoted master that keeps its clients (a partition) still takes PUBLISH and SUBSCRIBE:
    the waker compares its connection with the master Sentinel names."""
    from types import SimpleNamespace

    connector = RedisConnector(_endpoint(sentinels))
    try:
        on_master = SimpleNamespace(host="127.0.0.1", port=sentinels.master.port)
        on_replica = SimpleNamespace(host="127.0.0.1", port=sentinels.replica.port)
        assert await connector.stale(on_master) is False  # type: ignore[arg-type]
        assert await connector.stale(on_replica) is True  # type: ignore[arg-type]
    finally:
        await connector.close()


def test_wake_sentinel__settings_need_the_master_name() -> None:
    with pytest.raises(ConfigError, match="RIPPLE_REDIS_SENTINEL_MASTER"):
        load_settings(redis_sentinels="127.0.0.1:26379")
    with pytest.raises(ConfigError, match="host:port"):
        load_settings(redis_sentinels="localhost", redis_sentinel_master="m")
    settings = load_settings(
        redis_url="redis://127.0.0.1:6379/0",
        redis_sentinels="10.0.0.5:26379,10.0.0.6:26379",
        redis_sentinel_master="m",
    )
    # Sentinel wins over the URL
    assert settings.redis_endpoint() == RedisEndpoint(
        sentinels=(("10.0.0.5", 26379), ("10.0.0.6", 26379)), master="m"
    )


async def test_rate_limits__share_the_bucket_through_sentinels_master(
    sentinels: RedisSentinelSet,
) -> None:
    """The API's token rate limits find Redis as the wake layer does: on a Sentinel-managed
    Redis, two processes' limiters share one bucket on the master, and again after a failover."""
    endpoint = _endpoint(sentinels)
    limiters = [RateLimiter(endpoint, prefix="rl:") for _ in range(2)]
    limit = RateLimit(6, per=timedelta(hours=1))
    try:
        allowed = 0
        for _ in range(6):
            for limiter in limiters:
                allowed += (await limiter.check("tok", limit)).allowed
        assert allowed == 6  # 12 requests, one shared bucket of 6
        assert not (await limiters[0].check("tok", limit)).allowed

        sentinels.kill_master()
        await asyncio.to_thread(sentinels.wait_failover)

        attempts = iter(range(1000))

        async def shared_again() -> bool:
            # While a limiter cannot reach the master it decides locally (each allows a bucket
            # of its own); once both reach the new master, a new token's bucket is shared.
            token = f"fresh-{next(attempts)}"
            one = RateLimit(1, per=timedelta(hours=1))
            first = await limiters[0].check(token, one)
            second = await limiters[1].check(token, one)
            return first.allowed and not second.allowed

        await assert_eventually(shared_again, timeout=30, interval=0.2)
    finally:
        for limiter in limiters:
            await limiter.close()


async def test_wake_sentinel__closing_the_connector_closes_its_sentinel_connections(
    sentinels: RedisSentinelSet,
) -> None:
    """Master discoveries running at once, past a Sentinel that answers without the master:
    every Sentinel stays in the rotation, and closing the connector closes every connection
    it opened to them."""
    sentinels.unmonitor_on_first()
    before = _sockets()
    connector = RedisConnector(_endpoint(sentinels))
    clients = [connector.client() for _ in range(8)]
    try:
        assert all(await asyncio.gather(*(client.ping() for client in clients)))
        asked = {id(sentinel) for sentinel in connector._manager().sentinels}
    finally:
        for client in clients:
            await client.aclose()
        await connector.close()
    await assert_eventually(lambda: _sockets() <= before, timeout=5)
    assert len(asked) == len(sentinels.sentinel_ports)


async def test_rate_limits__closing_releases_every_socket(sentinels: RedisSentinelSet) -> None:
    """A limiter's refills and its announcement discover the master at once; its close
    releases every socket they opened, the Sentinels' included."""
    sentinels.unmonitor_on_first()
    before = _sockets()
    limiter = RateLimiter(_endpoint(sentinels), prefix="rc:")
    limit = RateLimit(10, per=timedelta(hours=1))
    try:
        decisions = await asyncio.gather(*(limiter.check(f"t{i}", limit) for i in range(8)))
        assert all(decision.allowed for decision in decisions)
    finally:
        await limiter.close()
    await assert_eventually(lambda: _sockets() <= before, timeout=5)


async def test_wake_sentinel__closing_the_waker_releases_every_socket(
    sentinels: RedisSentinelSet,
) -> None:
    """The subscriber and the publisher discover the master at once; the waker's close
    releases every socket they opened, the Sentinels' included."""
    sentinels.unmonitor_on_first()
    before = _sockets()
    waker = RedisWaker(_endpoint(sentinels), prefix="c:", poll_interval=30)
    await waker.start()
    try:
        waker.notify(RunFinished(run_id="z"))  # the publisher connects while the subscriber does
        await asyncio.wait_for(waker.connected.wait(), 10)
    finally:
        await waker.close()
    await assert_eventually(lambda: _sockets() <= before, timeout=5)


async def test_rate_limits__closing_during_a_refill_releases_every_socket(
    sentinels: RedisSentinelSet,
) -> None:
    """A request whose refill is still discovering the master when the limiter closes: the
    refill does not reconnect behind the close."""
    before = _sockets()
    limiter = RateLimiter(_endpoint(sentinels), prefix="rd:")
    request = asyncio.create_task(limiter.check("t", RateLimit(10, per=timedelta(hours=1))))
    await asyncio.sleep(0)  # the request starts its refill
    await limiter.close()
    assert (await request).allowed
    await assert_eventually(lambda: _sockets() <= before, timeout=5)
