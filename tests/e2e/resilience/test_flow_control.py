"""Flow control across worker processes: a concurrency key is respected by every
worker at once, with real processes, Postgres and Redis."""

from __future__ import annotations

import itertools

import pytest

from ripple.platform.client import Client
from tests.e2e.resilience.conftest import Effects
from tests.e2e.resilience.procs import Workers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

FLOW_APP = "tests.e2e.resilience.flow_app"
# Interval of each run's step: [start, end] by key, from the effect rows the bodies wrote.
INTERVALS = """
SELECT split_part(s.step, '.', 1) AS key, s.run_id, s.pid, s.at AS started, e.at AS ended
FROM effects s
JOIN effects e ON e.run_id = s.run_id AND e.step = split_part(s.step, '.', 1) || '.end'
WHERE s.step LIKE '%.start'
ORDER BY s.at
"""


async def test_flow__concurrency_key_holds_across_two_worker_processes(
    client: Client, workers: Workers, effects: Effects
) -> None:
    from tests.e2e.resilience.flow_app import per_key

    client.workflows.register(per_key)
    handles = [
        await client.start(per_key, {"account": {"id": key}})
        for _ in range(6)
        for key in ("a", "b", "c")
    ]
    first = await workers.start(app=FLOW_APP, concurrency=10)
    second = await workers.start(app=FLOW_APP, concurrency=10)
    pids = {await h.result(timeout=60) for h in handles}
    rows = await effects.pool.fetch(INTERVALS)
    assert len(rows) == len(handles)  # every body ran exactly once
    by_key: dict[str, list[tuple[object, object]]] = {}
    for row in rows:
        by_key.setdefault(row["key"], []).append((row["started"], row["ended"]))
    for key, spans in by_key.items():
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, f"two runs of key {key} overlapped"
    # different keys ran side by side
    spans = [(row["started"], row["ended"], row["key"]) for row in rows]
    assert any(
        a[2] != b[2] and a[0] < b[1] and b[0] < a[1] for a in spans for b in spans if a is not b
    )
    assert pids <= {first.pid, second.pid}
