"""Hot workflow queries use their indexes (guards against plan regressions)."""

from __future__ import annotations

from ripple.workflows import store
from tests.integration.workflows.conftest import App


async def test_claim__uses_the_partial_available_index(app: App) -> None:
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, status, completed_at) "
        "SELECT 'done-' || i, 'wf', 1, 'completed', now() FROM generate_series(1, 20000) AS i"
    )
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, available_at) "
        "SELECT 'due-' || i, 'wf', 1, now() + i * interval '1 second' "
        "FROM generate_series(1, 200) AS i"
    )
    await app.pool.execute("ANALYZE ripple_runs")
    for sql, args in [
        (store.CLAIM_RUNS, ["w", 30.0, 10, ["wf"], [1]]),
        (store.NEXT_DUE, [["wf"], [1]]),
    ]:
        rows = await app.pool.fetch("EXPLAIN " + sql, *args)
        plan = "\n".join(r[0] for r in rows)
        assert "ripple_runs_available" in plan, plan
        assert "Seq Scan on ripple_runs" not in plan, plan
