"""One owner per table: only a table's store module has SQL that names it.

Scans the string literals of every module under platform/, subscribers/ and workflows/ that
look like SQL and fails when a module that does not own a table names it, unless the use is in
the allow-list below (each entry says why it stays, for now). docs/architecture.md has the same
map in prose ("Table ownership"); change both together.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ("platform", "subscribers", "workflows")

OWNERS: dict[str, str] = {
    "ripple_migrations": "platform/core/migrate.py",
    "ripple_audit": "platform/access/audit_store.py",
    "ripple_tokens": "platform/access/token_store.py",
    "ripple_topic_schemas": "platform/events/contracts/schema_store.py",
    "ripple_topic_contracts": "platform/events/contracts/schema_store.py",
    "ripple_events": "platform/events/event_store.py",
    "ripple_event_keys": "platform/events/event_store.py",
    "ripple_partitions": "platform/ops/partition_store.py",
    "ripple_partitioned_tables": "platform/ops/partition_store.py",
    # A SQL function (migration 0028), the partition store's DDL.
    "ripple_partitions_ensure": "platform/ops/partition_store.py",
    "ripple_backfill_events": "platform/events/backfill_store.py",
    "ripple_subscriptions": "platform/events/subscription_store.py",
    "ripple_subscription_version": "platform/events/subscription_store.py",
    "ripple_queues": "subscribers/queues/queue_store.py",
    "ripple_queue_messages": "subscribers/queues/queue_store.py",
    "ripple_queue_dead_letters": "subscribers/queues/queue_store.py",
    "ripple_queue_dead_keys": "subscribers/queues/queue_store.py",
    "ripple_schedules": "platform/schedules/schedule_store.py",
    "ripple_webhook_deliveries": "subscribers/webhooks/delivery_store.py",
    "ripple_webhook_attempts": "subscribers/webhooks/delivery_store.py",
    "ripple_webhook_health": "subscribers/webhooks/delivery_store.py",
    **{
        table: "workflows/store/"
        for table in (
            "ripple_runs",
            "ripple_steps",
            "ripple_waits",
            "ripple_signals",
            "ripple_signal_keys",
            "ripple_workers",
            "ripple_concurrency_slots",
            "ripple_flow_controls",
            "ripple_throttle_windows",
            "ripple_fair_keys",
            "ripple_run_counts",
            "ripple_run_count_changes",
            "ripple_run_attributes",
            "ripple_approvals",
            "ripple_approval_keys",
        )
    },
}

# An owner ending in "/" is a package: each of its modules may name the table.

# Uses by a module that does not own the table, each with the reason it stays for now. Shrink
# this list; never grow it without a reason a reviewer accepts.
ALLOWED: dict[str, set[str]] = {
    # Retention deletes the idempotency keys of the event partitions it dropped (the workflow
    # tables are swept by their owner through the RunRetention port).
    "platform/ops/sweeper_store.py": {"ripple_event_keys", "ripple_queue_dead_keys"},
    # Read-only aggregates for the Prometheus gauges (queue depth, failing endpoints; stranded
    # runs come through the RunStats port).
    "platform/ops/observability_store.py": {
        "ripple_queues",
        "ripple_queue_messages",
        "ripple_subscriptions",
        "ripple_webhook_health",
    },
    # Read-only views of the dashboard (its workflow reads go through
    # ripple.workflows.store.views).
    "platform/ui/store.py": {
        "ripple_queues",
        "ripple_queue_messages",
        "ripple_queue_dead_letters",
        "ripple_queue_dead_keys",
        "ripple_webhook_deliveries",
    },
    # Publish probes whether any wait listens on a topic in the event insert itself (one round
    # trip per publish group, on the hot path) before calling the EventWaitResolver port
    # (which owns resolving waits, and listing them for explain).
    "platform/events/event_store.py": {"ripple_waits"},
    # A backfill reads the retained events and records its progress on the subscription row.
    "platform/events/backfill_store.py": {"ripple_events", "ripple_subscriptions"},
    # The delivery claim joins each delivery's subscription (status, target) in one statement.
    "subscribers/webhooks/delivery_store.py": {"ripple_subscriptions"},
}

_SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|FROM|JOIN|INTO)\b", re.IGNORECASE)
_TABLE = re.compile(r"\bripple_[a-z_]+\b")


def _tables_by_module() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for folder in CODE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            module = path.relative_to(ROOT).as_posix()
            for node in ast.walk(ast.parse(path.read_text(), module)):
                text = node.value if isinstance(node, ast.Constant) else None
                if isinstance(text, str) and _SQL.search(text):
                    found.setdefault(module, set()).update(_TABLE.findall(text))
    return found


def _owns(owner: str, module: str) -> bool:
    return module.startswith(owner) if owner.endswith("/") else module == owner


def test_table_ownership__only_owners_and_listed_readers_name_a_table() -> None:
    wrong = []
    for module, tables in _tables_by_module().items():
        for table in sorted(tables):
            owner = OWNERS.get(table)
            if owner is None:
                wrong.append(f"{module}: {table} has no owner in OWNERS (add it, and to the docs)")
            elif not _owns(owner, module) and table not in ALLOWED.get(module, set()):
                wrong.append(f"{module}: names {table}, owned by {owner}; go through the owner")
    assert not wrong, "\n".join(wrong)


def test_table_ownership__every_migrated_table_has_an_owner() -> None:
    created = set()
    for migration in (ROOT / "infra" / "sql").glob("*.sql"):
        created |= set(
            re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(ripple_[a-z_]+)", migration.read_text())
        )
    assert created, "no CREATE TABLE found in infra/sql"
    assert created <= set(OWNERS), f"tables without an owner: {sorted(created - set(OWNERS))}"


def test_table_ownership__the_allow_list_has_no_stale_entries() -> None:
    found = _tables_by_module()
    stale = {
        f"{module}: {table}"
        for module, tables in ALLOWED.items()
        for table in tables
        if table not in found.get(module, set())
    }
    assert not stale, f"remove these allow-list entries, the module no longer uses them: {stale}"
