"""Composition across real worker crashes: a race's journaled winner survives a SIGKILL and is
replayed in another process; a 100,000-iteration loop keeps a bounded journal and resumes from
its last recorded state, not from iteration 0, after SIGKILLs at iterations 1,000 and 90,000."""

from __future__ import annotations

import time

from ripple.platform.client import Client
from tests.e2e.resilience import app
from tests.e2e.resilience.conftest import Effects
from tests.e2e.resilience.procs import Workers


async def test_race__winner_is_replayed_in_another_process_after_sigkill(
    client: Client, effects: Effects, workers: Workers
) -> None:
    supervisor = await workers.start(restarts=2, RIPPLE_LEASE_SECONDS="1")
    handle = await client.start(app.crash_race)
    out = await handle.result(timeout=60)
    # In the first process `b` wins; replayed elsewhere, `a` would now finish first, but the
    # journaled winner stands and neither branch runs again.
    assert out == {"winner": "b", "value": "b"}
    counts = await effects.counts(handle.run_id)
    assert counts == {"a.started": 1, "b.started": 1, "crash": 1}
    assert [line for line in supervisor.stdout if line.startswith("exited")] == ["exited -9"]


ITERATIONS = 100_000
KILLS = (1_000, 90_000)


async def test_loop__100k_iterations_bounded_journal_and_resume_from_the_last_state(
    client: Client, effects: Effects, workers: Workers
) -> None:
    supervisor = await workers.start(restarts=len(KILLS), RIPPLE_LEASE_SECONDS="1")
    started = time.monotonic()
    handle = await client.start(
        app.long_loop, {"iterations": ITERATIONS, "every": 500, "kill_at": list(KILLS)}
    )
    assert await handle.result(timeout=300) == ITERATIONS
    took = time.monotonic() - started
    counts = await effects.counts(handle.run_id)
    assert [line for line in supervisor.stdout if line.startswith("exited")] == ["exited -9"] * 2
    assert counts["kill:1000"] == counts["kill:90000"] == 1
    sizes = [int(step.split(":")[1]) for step in counts if step.startswith("rows:")]
    # The journal stays bounded throughout (keep=10 iterations), whatever the iteration count.
    assert max(sizes) < 100
    # Each resume started from the last recorded state: the journaled "size" step of an
    # iteration before the kill never ran again (the one of the kill's own iteration may have,
    # as its result and the kill were not committed).
    size_steps = await effects.pool.fetch(
        "SELECT count(*) FROM effects WHERE run_id = $1 AND step LIKE 'rows:%'", handle.run_id
    )
    executions = int(size_steps[0][0])
    assert executions <= ITERATIONS // 500 + len(KILLS)
    rows = await client.pool.fetchval(
        "SELECT count(*) FROM ripple_steps WHERE run_id = $1", handle.run_id
    )
    assert rows < 100
    print(f"100k-iteration loop: {took:.1f} s with 2 kills; journal at most {max(sizes)} rows")
