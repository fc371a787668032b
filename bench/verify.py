"""Verify speed: runs replayed per second by `client.verify` over 10,000 recorded runs of
3-step journals (loading them in one read-only transaction, then replaying each against the
code), and the replay alone. The rows are written with SQL first."""

from __future__ import annotations

import time

from bench.common import bench_database, report
from ripple.platform.client import Client
from ripple.workflows import WorkflowContext, workflow
from ripple.workflows.runtime.verify import verify_runs

RUNS = 10_000

# $1 count: completed runs with a 3-step journal
_RUNS = """
WITH runs AS (
    INSERT INTO ripple_runs (run_id, workflow, version, status, input, output, attempt,
                             started_at, completed_at)
    SELECT 'bench-' || g, 'bench-verify', 1, 'completed', jsonb_build_object('i', g), '6', 1,
           now(), now()
    FROM generate_series(1, $1) AS g
    RETURNING run_id
)
INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, output, completed_at)
SELECT r.run_id, s.key, s.seq, 'run', 'completed', 1, s.output, now()
FROM runs r CROSS JOIN (VALUES ('a', 0, '1'::jsonb), ('b', 1, '2'::jsonb), ('c', 2, '3'::jsonb))
    AS s(key, seq, output)
"""


def _never(name: str) -> int:
    raise AssertionError(f"step {name} ran during a verify")


@workflow(name="bench-verify", version=1)
async def three_steps(ctx: WorkflowContext, inp: dict[str, int]) -> int:
    a = await ctx.step.run("a", _never, "a")
    b = await ctx.step.run("b", _never, "b")
    c = await ctx.step.run("c", _never, "c")
    return int(a) + int(b) + int(c)


async def run() -> None:
    async with bench_database(pool_max_size=4) as db, Client(settings=db.settings) as client:
        await client.pool.execute(_RUNS, RUNS)
        await client.pool.execute("ANALYZE ripple_runs; ANALYZE ripple_steps")
        started = time.perf_counter()
        result = await client.verify([three_steps], since=3600, limit=RUNS)
        elapsed = time.perf_counter() - started
        assert result.runs_checked == RUNS, result.runs_checked
        assert result.divergences == [], result.divergences[:3]
        runs = await client.deploys.recorded_runs([three_steps], since=3600, limit=RUNS)
        started = time.perf_counter()
        again = await verify_runs(runs, [three_steps])
        replay = time.perf_counter() - started
        assert again.runs_checked == RUNS
        report(
            "verify over 10,000 3-step journals",
            f"{RUNS / elapsed:,.0f} runs/s with the load ({elapsed:.2f} s); "
            f"replay alone {RUNS / replay:,.0f} runs/s",
        )
