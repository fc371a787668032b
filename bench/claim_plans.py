"""A worker's claim round trip with Postgres's own plan choice and with the worker's settings.

`python -m bench.claim_plans [N]`: for a worker serving one workflow and one serving eight, the
p50 of N claims of one fresh run each (plain claims, as an idle worker makes them), on a
connection with the worker's claimer settings (`CLAIMER_SETTINGS`: generic plans kept) and on
one with the same settings but Postgres's default plan cache mode (which re-plans the claim
on every execution when its generic plan looks costlier). Not a `make bench` suite: it
informs docs/benchmarks.md ("Claims").
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time

from bench.__main__ import cpu_calibration
from bench.common import bench_database
from ripple.platform.client import Client
from ripple.platform.core.db import DedicatedConnection
from ripple.workflows import store
from ripple.workflows.runtime.worker import CLAIMER_SETTINGS

INSERT_RUN = "INSERT INTO ripple_runs (run_id, workflow, version) VALUES ($1, 'wf', 1)"
DEFAULT = {k: v for k, v in CLAIMER_SETTINGS.items() if k != "plan_cache_mode"}


async def run(n: int) -> None:
    print(f"# cpu {cpu_calibration()}", flush=True)
    for served in (1, 8):
        pairs = [("wf", 1)] + [(f"other{i}", 1) for i in range(served - 1)]
        async with bench_database() as db, Client(settings=db.settings) as client:
            claimers = {
                "Postgres's plan choice": DedicatedConnection(db.settings, **DEFAULT),
                "the worker's (generic plans)": DedicatedConnection(
                    db.settings, **CLAIMER_SETTINGS
                ),
            }
            times: dict[str, list[float]] = {name: [] for name in claimers}
            try:
                for i in range(n):
                    for name, claimer in claimers.items():
                        run_id = f"{i}-{name}"
                        await client.pool.execute(INSERT_RUN, run_id)
                        conn = await claimer.get()
                        started = time.perf_counter()
                        claims, _, _ = await store.claim_runs_plain(
                            conn, worker_id="bench", lease=30.0, limit=100, pairs=pairs
                        )
                        times[name].append(time.perf_counter() - started)
                        assert [c.run_id for c in claims] == [run_id]
                        await client.pool.execute(
                            "UPDATE ripple_runs SET status = 'completed' WHERE run_id = $1", run_id
                        )
            finally:
                for claimer in claimers.values():
                    await claimer.close()
            for name, values in times.items():
                p50 = statistics.median(values[10:]) * 1000  # after the first plans are made
                print(f"serving {served} workflow(s), {name:30} claim p50 {p50:.3f} ms", flush=True)
    print(f"# cpu after: {cpu_calibration()}", flush=True)


if __name__ == "__main__":
    asyncio.run(run(int(sys.argv[1]) if len(sys.argv) > 1 else 300))
