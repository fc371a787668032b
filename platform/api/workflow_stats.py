"""Read-only run counts per workflow and status, for `GET /v1/workflows`.

The workflow runtime owns `ripple_runs`; this module only reads it, with one aggregate query
(a scan of the runs table: retention keeps it bounded; an operator route, not a hot path).
"""

from __future__ import annotations

from typing import Final

from ripple.platform.db import Pool, map_errors

__all__ = ["workflow_counts"]

# no parameters
COUNT_RUNS_BY_WORKFLOW: Final = """
SELECT workflow, status, count(*) AS n
FROM ripple_runs
GROUP BY workflow, status
ORDER BY workflow, status
"""


async def workflow_counts(pool: Pool) -> dict[str, dict[str, int]]:
    """`{workflow: {status: count}}` over every run the database holds."""
    counts: dict[str, dict[str, int]] = {}
    with map_errors():
        async with pool.acquire() as conn:
            rows = await conn.fetch(COUNT_RUNS_BY_WORKFLOW)
    for row in rows:
        counts.setdefault(row["workflow"], {})[row["status"]] = int(row["n"])
    return counts
