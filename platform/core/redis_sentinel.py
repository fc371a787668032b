"""redis-py's asyncio Sentinel manager, with master discovery one at a time.

Imported by the first `RedisConnector` on a Sentinel endpoint (it loads redis).
"""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio.sentinel import Sentinel

__all__ = ["SerialSentinel"]


class SerialSentinel(Sentinel):
    """A Sentinel manager whose master discoveries run one at a time.

    redis-py's `discover_master` moves the Sentinel that answered to the front of `sentinels`
    by position, after awaiting the answer: two discoveries at once (a limiter's refill and
    its announcement, the waker's subscriber and publisher) can store one client twice and
    drop another, which is then never asked again and never closed by `aclose()`.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._discovering = asyncio.Lock()

    async def discover_master(self, service_name: str) -> Any:
        async with self._discovering:
            return await super().discover_master(service_name)
