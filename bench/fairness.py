"""Fair claim vs the unconstrained claim: claim throughput of a worker's claim statement over a
100,000-run backlog, with 1, 100 and 10,000 active fairness keys.

The worker's claims: `claim_runs_plain` without and with `fair` (neither workflow declares
concurrency or throttle). Each database holds two backlogs of BACKLOG pending runs: one of a
plain workflow and one of a fair workflow spread over the keys. Two claimers with the worker's
settings (generic plans) claim batches of BATCH, alternating claim by claim so both see the
same machine; claimed runs are completed between claims (outside the timing). Figure: runs
claimed per second of claim statement time, fair over unconstrained.
"""

from __future__ import annotations

import time

import asyncpg

from bench.common import bench_database, report
from ripple.platform.core.db import DedicatedConnection, create_pool
from ripple.platform.core.migrate import apply_migrations
from ripple.workflows import store
from ripple.workflows.runtime.worker import CLAIMER_SETTINGS

BACKLOG = 100_000
BATCH = 10
ROUNDS = 2000
CLAIMS_PER_ROUND = 1

_FILL_PLAIN = (
    "INSERT INTO ripple_runs (run_id, workflow, version, available_at) "
    "SELECT 'p-' || i, 'plain', 1, now() - i * interval '1 millisecond' "
    "FROM generate_series(1, $1) AS i"
)
_FILL_FAIR = (
    "INSERT INTO ripple_runs (run_id, workflow, version, fairness_key, available_at) "
    "SELECT 'f-' || i, 'fair', 1, 'k' || (i % $2), now() - i * interval '1 millisecond' "
    "FROM generate_series(1, $1) AS i"
)
_COMPLETE = "UPDATE ripple_runs SET status = 'completed' WHERE run_id = ANY($1::text[])"


async def _measure(keys: int) -> tuple[float, float, int]:
    """(unconstrained runs/s, fair runs/s, active keys seen by the fair claims) at `keys`."""
    async with bench_database() as db:
        pool = await create_pool(db.settings)
        try:
            await apply_migrations(pool)
            setup = await asyncpg.connect(db.url)  # no statement timeout for the fill
            try:
                await setup.execute(_FILL_PLAIN, BACKLOG)
                await setup.execute(_FILL_FAIR, BACKLOG, keys)
                await setup.execute("ANALYZE ripple_runs")
                await setup.execute("ANALYZE ripple_fair_keys")
                active = int(
                    await setup.fetchval("SELECT count(*) FROM ripple_fair_keys WHERE active")
                )
            finally:
                await setup.close()
            claimers = [DedicatedConnection(db.settings, **CLAIMER_SETTINGS) for _ in range(2)]
            spent = [0.0, 0.0]
            claimed = [0, 0]
            try:
                plain_conn, fair_conn = [await c.get() for c in claimers]
                for _ in range(ROUNDS):
                    for side in (0, 1):
                        for _ in range(CLAIMS_PER_ROUND):
                            started = time.perf_counter()
                            if side == 0:
                                runs, _, _ = await store.claim_runs_plain(
                                    plain_conn,
                                    worker_id="bench",
                                    lease=30.0,
                                    limit=BATCH,
                                    pairs=[("plain", 1)],
                                )
                            else:
                                runs, _, _ = await store.claim_runs_plain(
                                    fair_conn,
                                    worker_id="bench",
                                    lease=30.0,
                                    limit=BATCH,
                                    pairs=[("fair", 1)],
                                    fair=["fair"],
                                )
                            spent[side] += time.perf_counter() - started
                            claimed[side] += len(runs)
                            await pool.execute(_COMPLETE, [r.run_id for r in runs])
            finally:
                for claimer in claimers:
                    await claimer.close()
        finally:
            await pool.close()
    return claimed[0] / spent[0], claimed[1] / spent[1], active


async def run() -> None:
    for keys in (1, 100, 10_000):
        plain, fair, active = await _measure(keys)
        report(
            f"fair claim, {keys:,} active keys",
            f"{fair:,.0f} runs/s vs {plain:,.0f} unconstrained ({fair / plain:.0%}; "
            f"{BACKLOG:,}-run backlogs, batches of {BATCH}, {active:,} keys active)",
        )


if __name__ == "__main__":
    import asyncio

    asyncio.run(run())
