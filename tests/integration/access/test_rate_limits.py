"""Per-token rate limits: one bucket shared by every API process through Redis, and a local
share of the limit per process when Redis is unreachable."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from ripple.platform.access.rate_limits import RateLimiter
from ripple.platform.core.limits import RateLimit
from ripple.platform.core.wake import RedisConnector, RedisEndpoint


async def test_processes_share_one_bucket(redis_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    limiters = [RateLimiter(redis_url, prefix=prefix) for _ in range(3)]
    limit = RateLimit(10, per=timedelta(hours=1))
    try:
        allowed = 0
        for _ in range(10):
            for limiter in limiters:
                allowed += (await limiter.check("tok", limit)).allowed
        assert allowed == 10  # 30 requests over three "processes", one bucket of 10
        refused = await limiters[0].check("tok", limit)
        assert not refused.allowed
        assert refused.retry_after > 0
        assert (await limiters[1].check("other-token", limit)).allowed
    finally:
        for limiter in limiters:
            await limiter.close()


async def test_high_limits_are_taken_in_batches_and_never_exceeded(redis_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    limiters = [RateLimiter(redis_url, prefix=prefix) for _ in range(2)]
    limit = RateLimit(500, per=timedelta(hours=1))  # refills ~0.14/s: no refill in the test
    try:
        allowed = 0
        for _ in range(400):
            for limiter in limiters:
                allowed += (await limiter.check("tok", limit)).allowed
        assert allowed == 500
    finally:
        for limiter in limiters:
            await limiter.close()


async def test_without_redis_each_process_takes_its_share(redis_url: str) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    live = [RateLimiter(redis_url, prefix=prefix) for _ in range(2)]
    limit = RateLimit(10, per=timedelta(hours=1))
    try:
        for limiter in live:  # both announce themselves: two live API processes
            await limiter.check("warm", limit)
        cut = live[0]
        await cut._announce()
        assert cut.processes == 2
        await cut.close()  # its Redis connection goes; the last count stays
        cut._connector = RedisConnector(RedisEndpoint(url="redis://127.0.0.1:1"))  # unreachable
        results = [(await cut.check("tok", limit)).allowed for _ in range(10)]
        assert results == [True] * 5 + [False] * 5  # 10 / 2 live processes
    finally:
        for limiter in live:
            await limiter.close()


async def test_without_any_redis_the_limit_is_local() -> None:
    limiter = RateLimiter(None)
    limit = RateLimit(3, per=timedelta(hours=1))
    results = [(await limiter.check("tok", limit)).allowed for _ in range(5)]
    assert results == [True, True, True, False, False]
    await limiter.close()


async def test_a_burst_shares_one_refill(redis_url: str) -> None:
    limiter = RateLimiter(redis_url, prefix=f"t{uuid.uuid4().hex[:10]}:")
    calls = 0
    take = limiter._take_shared

    async def counted(token_id: str, limit: RateLimit) -> tuple[int, float]:
        nonlocal calls
        calls += 1
        return await take(token_id, limit)

    limiter._take_shared = counted  # type: ignore[method-assign]
    try:
        limit = RateLimit(100_000, per=1.0)  # batches of 100
        decisions = await asyncio.gather(*(limiter.check("tok", limit) for _ in range(60)))
        assert all(d.allowed for d in decisions)
        assert calls == 1  # not one Redis round trip per waiting request
    finally:
        await limiter.close()
