"""Server-side execution time of the fair claim and the unconstrained claim.

`python -m bench.fair_claim_plans [ROUNDS]`: the database of `bench.fairness` (two
100,000-run backlogs, one of them over 1, 100 or 10,000 fairness keys); the two claim
statements (`claim_runs_plain`'s, without and with `fair`) are prepared once with generic plans
and executed alternately under `EXPLAIN (ANALYZE, TIMING OFF)`, claimed runs completed between
claims. Figures: the p50 of each statement's execution time in Postgres and their ratio; no
client, network or commit in them, so they move less with the machine than `bench.fairness`.
Not a `make bench` suite: it informs docs/benchmarks.md ("Claims").
"""

from __future__ import annotations

import asyncio
import re
import statistics
import sys

import asyncpg

from bench.__main__ import cpu_calibration
from bench.common import bench_database
from bench.fairness import _FILL_FAIR, _FILL_PLAIN, BACKLOG
from ripple.platform.core.db import create_pool
from ripple.platform.core.migrate import apply_migrations
from ripple.workflows.runtime.worker import CLAIMER_SETTINGS
from ripple.workflows.store import claim as claim_sql

_TYPES = "text, float8, int, text[], text[], int[], bool"
_DONE = "UPDATE ripple_runs SET status = 'completed' WHERE workflow = $1 AND status = 'running'"
_EXECUTION = re.compile(r"Execution Time: ([\d.]+) ms")


async def _measure(keys: int, rounds: int) -> tuple[float, float]:
    """p50 ms of (unconstrained, fair) claim executions at `keys` active keys."""
    async with bench_database() as db:
        pool = await create_pool(db.settings)
        try:
            await apply_migrations(pool)
            setup = await asyncpg.connect(db.url)
            try:
                await setup.execute(_FILL_PLAIN, BACKLOG)
                await setup.execute(_FILL_FAIR, BACKLOG, keys)
                await setup.execute("ANALYZE ripple_runs")
                await setup.execute("ANALYZE ripple_fair_keys")
            finally:
                await setup.close()
            conn = await asyncpg.connect(db.url, server_settings=dict(CLAIMER_SETTINGS))
            try:
                await conn.execute(f"PREPARE plain({_TYPES}) AS {claim_sql._CLAIM_PLAIN}")
                await conn.execute(
                    f"PREPARE fair({_TYPES}, text[]) AS {claim_sql._CLAIM_FAIR_QUICK}"
                )
                times: dict[str, list[float]] = {"plain": [], "fair": []}
                for i in range(rounds + 20):
                    for name, extra in (("plain", ""), ("fair", ", '{fair}'")):
                        workflow = "{" + name + "}"
                        rows = await conn.fetch(
                            "EXPLAIN (ANALYZE, TIMING OFF, COSTS OFF) EXECUTE "
                            f"{name}('bench', 30, 10, '{workflow}', '{workflow}', '{{1}}', true"
                            f"{extra})"
                        )
                        found = _EXECUTION.search("\n".join(r[0] for r in rows))
                        assert found is not None
                        if i >= 20:  # after the first executions
                            times[name].append(float(found.group(1)))
                        await pool.execute(_DONE, name)
            finally:
                await conn.close()
        finally:
            await pool.close()
    return statistics.median(times["plain"]), statistics.median(times["fair"])


async def run(rounds: int) -> None:
    print(f"# cpu {cpu_calibration()}", flush=True)
    for keys in (1, 100, 10_000):
        plain, fair = await _measure(keys, rounds)
        print(
            f"{keys:>6,} active keys: fair claim p50 {fair:.3f} ms, unconstrained {plain:.3f} ms"
            f" (fair {plain / fair:.0%} of the unconstrained throughput)",
            flush=True,
        )
    print(f"# cpu after: {cpu_calibration()}", flush=True)


if __name__ == "__main__":
    asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 300))
