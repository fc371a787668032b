"""Run counts per workflow and status, for `GET /v1/workflows`, through the `RunStats` port
(the workflow store owns `ripple_runs`; this module names no table).
"""

from __future__ import annotations

from ripple.platform.core.db import Pool, map_errors
from ripple.platform.ops.ports import RunStats

__all__ = ["workflow_counts"]


async def workflow_counts(pool: Pool, stats: RunStats) -> dict[str, dict[str, int]]:
    """`{workflow: {status: count}}` over every run the database holds."""
    with map_errors():
        async with pool.acquire() as conn:
            return await stats.count_runs(conn)
