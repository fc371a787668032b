"""The sharding rule, as a test: every SQL statement of the store modules that touches a
run-scoped table (runs, the journal `ripple_steps`, waits — which hold the timers —, signals)
names `run_id` where it selects or keys rows (a predicate, a join or an insert's columns), so
runs and journals can be sharded by `run_id` with every run-scoped query routed to one shard
(Citus-style co-location). Cross-run statements are listed below, each with why it is
cross-run: on a sharded deployment they fan out to every shard (claims, sweeps, listings).

Only module-level SQL constants are checked; a statement built elsewhere escapes the rule, so
stores keep their SQL as constants (as STYLE.md asks anyway).
"""

from __future__ import annotations

import importlib
import re
from typing import Final

import pytest

STORES: Final = (
    "ripple.workflows.store.runs",
    "ripple.workflows.store.journal",
    "ripple.workflows.store.waits",
    "ripple.workflows.store.claim",
    "ripple.workflows.store.operations",
    "ripple.workflows.store.upkeep",
    "ripple.workflows.store.views",
    "ripple.platform.events.event_store",
    "ripple.subscribers.queues.queue_store",
    "ripple.platform.events.subscription_store",
    "ripple.platform.schedules.schedule_store",
    "ripple.platform.ops.sweeper_store",
    "ripple.platform.events.backfill_store",
    "ripple.platform.ops.observability_store",
    "ripple.subscribers.webhooks.delivery_store",
    "ripple.platform.ui.store",
)

#: Tables whose rows belong to one run (the shard key is their `run_id`).
RUN_SCOPED: Final = re.compile(r"\bripple_(runs|steps|waits|signals)\b")

#: `run_id` in a position that selects or keys rows.
KEYED: Final = (
    re.compile(r"\b(WHERE|ON|USING|AND|OR|JOIN)\b[^;]*?\brun_id\b", re.IGNORECASE | re.DOTALL),
    re.compile(r"\bINSERT\s+INTO\s+ripple_\w+\s*(AS\s+\w+\s*)?\([^)]*\brun_id\b", re.I),
)

#: Statements that are cross-run by nature, with the reason. On a sharded deployment each
#: runs on every shard and the caller merges (or, for reference data, on the coordinator).
CROSS_RUN: Final = {
    # Claims: any due run of the worker's workflows, wherever it lives.
    "ripple.workflows.store.claim._CLAIM_RUNS": "claim",
    "ripple.workflows.store.claim._NEXT_DUE": "claim: when the next run becomes due",
    # Fair claims: the claim's tail advancing each key's pass over the runs it took, and a
    # workflow that dropped Fairness handing its pending runs back to the plain claim.
    "ripple.workflows.store.claim._ADVANCE": "claim: fairness keys' pass",
    "ripple.workflows.store.claim._UNFAIR_RUNS": "a workflow's pending runs lose their keys",
    # Listings and counts for operators and the dashboard (fan-out + merge by created order).
    "ripple.workflows.store.runs._LIST_RUNS": "listing",
    "ripple.workflows.store.operations._COUNT_RUN_FILTER": "bulk operations: count matching runs",
    "ripple.workflows.store.operations._SELECT_RUN_BATCH": "bulk operations: a page of runs",
    "ripple.workflows.store.upkeep._COUNT_RUNS_BY_WORKFLOW": "run counts by workflow and status",
    "ripple.workflows.store.views._SELECT_STRANDED_SAMPLE": "dashboard: runs no worker serves",
    "ripple.workflows.store.upkeep._SELECT_STRANDED_RUNS": "gauge over all runs",
    # Publish: whether each inserted event's topic has event waits at all (the probe that
    # decides whether wait resolution runs), in the event insert.
    "ripple.platform.events.event_store.INSERT_EVENTS": "publish: topics with waits",
    # Retention sweeps delete expired runs of every shard in bounded batches.
    "ripple.workflows.store.upkeep._DELETE_EXPIRED_RUNS": "sweep",
    # Idempotency keys look a run up by (workflow, key), not by id: a unique index that a
    # sharded deployment keeps on the coordinator (or hashes by the key).
    "ripple.workflows.store.runs._SELECT_RUN_BY_KEY": "idempotency key lookup",
    "ripple.workflows.store.runs._SELECT_CHILD_BY_KEY": "child run by its idempotency key",
}


def _statements() -> list[tuple[str, str]]:
    found = []
    for module_name in STORES:
        module = importlib.import_module(module_name)
        for name, value in vars(module).items():
            if name.lstrip("_").isupper() and isinstance(value, str) and RUN_SCOPED.search(value):
                found.append((f"{module_name}.{name}", value))
    return found


STATEMENTS: Final = _statements()


def test_run_scoped_sql__the_scan_finds_the_run_statements() -> None:
    names = {name for name, _ in STATEMENTS}
    assert "ripple.workflows.store.claim._CLAIM_RUNS" in names
    assert "ripple.workflows.store.journal._SELECT_STEPS" in names
    assert len(names) > 40


@pytest.mark.parametrize(
    ("name", "sql"), [s for s in STATEMENTS if s[0] not in CROSS_RUN], ids=lambda v: v[:60]
)
def test_run_scoped_sql__names_run_id(name: str, sql: str) -> None:
    assert any(p.search(sql) for p in KEYED), (
        f"{name} touches a run-scoped table without naming run_id in a predicate, join or "
        "insert: key it by run_id, or add it to CROSS_RUN with the reason it spans runs"
    )


def test_run_scoped_sql__the_allow_list_has_no_stale_entries() -> None:
    names = {name for name, _ in STATEMENTS}
    assert set(CROSS_RUN) <= names, sorted(set(CROSS_RUN) - names)
