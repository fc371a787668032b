"""redis-py parses replies and pub/sub messages with hiredis (the `redis[hiredis]` dependency)."""

from __future__ import annotations

from redis.utils import HIREDIS_AVAILABLE


def test_redis__parses_with_hiredis() -> None:
    # The pure-Python RESP3 parser cost 68-87 us of CPU per hint received here, hiredis 47-57
    # (`python -m bench.wake_hints`): dropping the extra must not go unnoticed.
    assert HIREDIS_AVAILABLE
