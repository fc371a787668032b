"""Per-token request rate limits: a token bucket shared by every API process through Redis.

Each token with a `RateLimit` has one bucket in Redis (a Lua script refills and takes in one
round trip, on Redis's clock). So that a high limit does not cost a Redis round trip per
request, a process takes a small batch at once (1 % of a second's worth of the limit, at most
`_MAX_BATCH` and half the bucket, at least 1) and spends it locally within `_BATCH_SECONDS`;
what it does not spend in time lapses. Small limits (under 100 per second) are therefore exact,
and a larger one errs by at most one batch per process on the side of refusing.

With Redis unreachable each process keeps a local bucket with the token's rate divided by the
number of live API processes, as last counted in Redis (each limiter announces itself there
every few seconds), and tries Redis again a second later.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ripple.platform.core.limits import RateLimit
from ripple.platform.core.logs import Outage, get_logger
from ripple.platform.core.wake import RedisConnector, RedisEndpoint

if TYPE_CHECKING:
    import redis.asyncio as aioredis

__all__ = ["Decision", "RateLimiter"]

log = get_logger("ripple.rate_limits")

#: How long a process counts as live after its last announcement.
_LIVE_SECONDS: Final = 10.0
#: How often a limiter announces itself and recounts the live processes.
_ANNOUNCE_SECONDS: Final = 3.0
#: After a Redis failure, how long the local buckets decide before Redis is tried again.
_RETRY_SECONDS: Final = 1.0
#: Redis round trips longer than this count as failures (the request decides locally).
_REDIS_TIMEOUT: Final = 0.25
#: Most requests a process takes from a shared bucket at once, and how long it may spend them.
_MAX_BATCH: Final = 100
_BATCH_SECONDS: Final = 0.1

# KEYS[1] the bucket; ARGV[1] capacity, ARGV[2] refill per second, ARGV[3] tokens wanted.
# Returns {tokens granted (0..wanted), seconds until one token is available (string)}.
_TAKE: Final = """
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local now = redis.call('TIME')
local t = tonumber(now[1]) + tonumber(now[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or capacity
local at = tonumber(state[2]) or t
tokens = math.min(capacity, tokens + math.max(0, t - at) * rate)
local allowed = math.min(tonumber(ARGV[3]), math.floor(tokens))
local wait = 0
if allowed >= 1 then
  tokens = tokens - allowed
else
  allowed = 0
  wait = (1 - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(t))
redis.call('PEXPIRE', KEYS[1], math.ceil(capacity / rate * 1000) + 1000)
return {allowed, tostring(wait)}
"""


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether a request may go on; if not, the seconds to wait (`Retry-After`)."""

    allowed: bool
    retry_after: float = 0.0


class _Bucket:
    __slots__ = ("at", "tokens")

    def __init__(self, tokens: float, at: float) -> None:
        self.tokens = tokens
        self.at = at

    def take(self, capacity: float, rate: float) -> Decision:
        now = time.monotonic()
        self.tokens = min(capacity, self.tokens + (now - self.at) * rate)
        self.at = now
        if self.tokens >= 1:
            self.tokens -= 1
            return Decision(True)
        return Decision(False, (1 - self.tokens) / rate)


class RateLimiter:
    """Decides per token whether a request is within its `RateLimit` (see the module doc)."""

    def __init__(self, redis: RedisEndpoint | str | None, *, prefix: str = "ripple:") -> None:
        """`redis`: the wake layer's endpoint (a URL or Sentinel's master), or None to decide
        locally only."""
        if isinstance(redis, str):
            redis = RedisEndpoint(url=redis)
        self._connector = RedisConnector(redis) if redis is not None and redis.configured else None
        self._prefix = prefix
        self._redis: aioredis.Redis | None = None
        self._script: Any = None
        self._down_until = 0.0 if self._connector is not None else math.inf
        self._local: dict[str, _Bucket] = {}
        #: Per token: requests taken from the shared bucket not spent yet, and until when.
        self._batches: dict[str, tuple[int, float]] = {}
        #: Per token: the Redis refill in flight (concurrent requests wait for it, so a burst
        #: makes one round trip, not one each).
        self._refills: dict[str, asyncio.Future[Decision]] = {}
        self._processes = 1
        self._member = uuid.uuid4().hex
        self._announced = 0.0
        self._announcing: asyncio.Task[None] | None = None
        self._outage = Outage(log, "rate_limit_redis_failed", "rate_limit_redis_recovered")

    async def check(self, token_id: str, limit: RateLimit) -> Decision:
        """Take one request from `token_id`'s bucket."""
        while True:
            now = time.monotonic()
            batch = self._batches.get(token_id)
            if batch is not None and batch[0] > 0 and now < batch[1]:
                self._batches[token_id] = (batch[0] - 1, batch[1])
                return Decision(True)
            if now < self._down_until:
                return self._take_local(token_id, limit)
            refill = self._refills.get(token_id)
            if refill is None:
                refill = asyncio.ensure_future(self._refill(token_id, limit))
                self._refills[token_id] = refill
                refill.add_done_callback(lambda _: self._refills.pop(token_id, None))
            decision = await asyncio.shield(refill)
            if not decision.allowed:
                return decision
            # The refill put its grant in the batch: take from it (or refill again when the
            # requests that waited with this one spent it all).

    async def _refill(self, token_id: str, limit: RateLimit) -> Decision:
        """Take a batch from the shared bucket into this process's batch; on a Redis failure
        decide locally from now on for a while (the decision is then the local bucket's)."""
        now = time.monotonic()
        if now - self._announced > _ANNOUNCE_SECONDS and self._connector is not None:
            self._announced = now
            if self._announcing is None or self._announcing.done():
                self._announcing = asyncio.create_task(self._announce())
        try:
            async with asyncio.timeout(_REDIS_TIMEOUT):
                granted, wait = await self._take_shared(token_id, limit)
            self._outage.recovered()
        except Exception as exc:  # Redis down or slow: decide locally
            self._outage.failed(exc)
            self._down_until = now + _RETRY_SECONDS
            return Decision(True)  # the waiters loop and take from their local bucket
        if granted < 1:
            return Decision(False, wait)
        self._batches[token_id] = (granted, time.monotonic() + _BATCH_SECONDS)
        return Decision(True)

    def _client(self) -> aioredis.Redis:
        if self._redis is None:
            assert self._connector is not None
            self._redis = self._connector.client(
                socket_connect_timeout=_REDIS_TIMEOUT, socket_timeout=_REDIS_TIMEOUT
            )
            self._script = self._redis.register_script(_TAKE)
        return self._redis

    async def _take_shared(self, token_id: str, limit: RateLimit) -> tuple[int, float]:
        """(requests granted, seconds until one is available) from the shared bucket."""
        self._client()
        wanted = max(1, min(_MAX_BATCH, int(limit.rate / 100), limit.limit // 2))
        granted, wait = await self._script(
            keys=[f"{self._prefix}ratelimit:{token_id}"], args=[limit.limit, limit.rate, wanted]
        )
        return int(granted), float(wait)

    def _take_local(self, token_id: str, limit: RateLimit) -> Decision:
        processes = max(1, self._processes)
        capacity = max(1.0, limit.limit / processes)
        bucket = self._local.get(token_id)
        if bucket is None:
            bucket = self._local[token_id] = _Bucket(capacity, time.monotonic())
        return bucket.take(capacity, limit.rate / processes)

    async def _announce(self) -> None:
        """Mark this process live in Redis and count the live ones."""
        key = f"{self._prefix}api_processes"
        with contextlib.suppress(Exception):  # counted again at the next announcement
            redis = self._client()
            async with asyncio.timeout(_REDIS_TIMEOUT * 4):
                now = time.time()
                pipe = redis.pipeline(transaction=False)
                pipe.zadd(key, {self._member: now})
                pipe.zremrangebyscore(key, "-inf", now - _LIVE_SECONDS)
                pipe.zcard(key)
                pipe.expire(key, int(_LIVE_SECONDS * 3))
                results = await pipe.execute()
            self._processes = max(1, int(results[2]))

    @property
    def processes(self) -> int:
        """Live API processes as last counted (the divisor of the local limits)."""
        return self._processes

    async def close(self) -> None:
        """Let the refills in flight finish (each within `_REDIS_TIMEOUT`), stop announcing and
        close the Redis connections: a refill left running would reconnect after the close."""
        while self._refills:
            await asyncio.wait(list(self._refills.values()))
        if self._announcing is not None:
            self._announcing.cancel()
            with contextlib.suppress(BaseException):
                await self._announcing
        if self._redis is not None:
            with contextlib.suppress(Exception):
                await self._redis.zrem(f"{self._prefix}api_processes", self._member)
            with contextlib.suppress(Exception):
                await self._redis.aclose()
            self._redis = None
        if self._connector is not None:
            await self._connector.close()
