"""Query-plan guards: sweeper batches find expired rows by index, not by scanning live ones
(events and deliveries are retired by dropping partitions: tests/integration/platform/
test_partitions.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from ripple.platform.core.db import Pool
from ripple.platform.ops import sweeper_store
from ripple.workflows.store import upkeep

DAY = 86_400.0


def walk(plan: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [plan]
    for child in plan.get("Plans", []):
        nodes.extend(walk(child))
    return nodes


async def plan_nodes(pool: Pool, sql: str, *args: Any) -> list[dict[str, Any]]:
    raw = await pool.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args)
    document = json.loads(raw) if isinstance(raw, str) else raw
    return walk(document[0]["Plan"])


def scans(nodes: list[dict[str, Any]], table: str) -> list[str]:
    return [n["Node Type"] for n in nodes if n.get("Relation Name") == table]


async def test_sweeper_plans__runs_and_event_keys_use_indexes(pool: Pool) -> None:
    await pool.execute(
        """
        INSERT INTO ripple_runs (run_id, workflow, status, completed_at)
        SELECT 'r' || g, 'wf', CASE WHEN g % 100 = 0 THEN 'completed' ELSE 'sleeping' END,
               CASE WHEN g % 100 = 0 THEN now() END
        FROM generate_series(1, 20000) AS g
        """
    )
    await pool.execute(
        """
        INSERT INTO ripple_event_keys (idempotency_key, event_id)
        SELECT 'k' || g, gen_random_uuid() FROM generate_series(1, 20000) AS g
        """
    )
    await pool.execute("ANALYZE ripple_runs, ripple_event_keys")

    runs = await plan_nodes(pool, upkeep._DELETE_EXPIRED_RUNS, 90 * DAY, 500, 30 * DAY, 10_000)
    assert "Seq Scan" not in scans(runs, "ripple_runs"), runs
    assert any(n.get("Index Name") == "ripple_runs_terminal" for n in runs), runs

    oldest = datetime(1970, 1, 1, tzinfo=UTC)  # the lower bound of the oldest partition
    keys = await plan_nodes(pool, sweeper_store.DELETE_EVENT_KEYS_BEFORE, oldest, 500)
    assert any(n.get("Index Name") == "ripple_event_keys_event" for n in keys), keys
