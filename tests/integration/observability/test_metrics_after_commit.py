"""Counters count what committed, once: a rolled-back start or publish counts
nothing, a group commit retried after a refused batch counts each run once, a bulk retry
counts each run it retried."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from prometheus_client import REGISTRY

from ripple.platform.client import Client
from ripple.platform.errors import RippleError
from ripple.subscribers import WorkflowTarget
from tests.helpers import assert_eventually


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(f"{name}_total", labels) or 0.0


def started(workflow: str) -> float:
    return counter("workflow_runs_started", workflow=workflow)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def runs_of(client: Client, workflow: str) -> int:
    count: int = await client.pool.fetchval(
        "SELECT count(*) FROM ripple_runs WHERE workflow = $1", workflow
    )
    return count


@pytest.mark.parametrize("commit", [False, True], ids=["rolled-back", "committed"])
async def test_metrics__a_start_in_a_caller_transaction_counts_once_it_commits(
    client: Client, commit: bool
) -> None:
    name = unique("metric-start")
    async with client.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await client.start(name, {"n": 1}, conn=conn)
        await client.start(name, {"n": 2}, conn=conn)
        assert started(name) == 0  # not committed yet
        await (tx.commit() if commit else tx.rollback())
    await assert_eventually(lambda: client.workflows.commit_watch.pending == 0)
    assert await runs_of(client, name) == (2 if commit else 0)
    assert started(name) == (2 if commit else 0)


async def test_metrics__a_start_outside_a_transaction_block_counts_at_once(
    client: Client,
) -> None:
    name = unique("metric-autocommit")
    async with client.pool.acquire() as conn:
        await client.start(name, {}, conn=conn)  # its insert committed as it ran
    assert client.workflows.commit_watch.pending == 0
    assert started(name) == 1


@pytest.mark.parametrize("commit", [False, True], ids=["rolled-back", "committed"])
async def test_metrics__a_publish_in_a_caller_transaction_counts_once_it_commits(
    client: Client, commit: bool
) -> None:
    prefix = unique("metricpub")
    topic = f"{prefix}.created"
    before = counter("events_published", topic_prefix=prefix)
    async with client.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await client.publish(topic, {"id": 1}, conn=conn)
        assert counter("events_published", topic_prefix=prefix) == before
        await (tx.commit() if commit else tx.rollback())
    await assert_eventually(lambda: client.publisher.commit_watch.pending == 0)
    stored = await client.pool.fetchval(
        "SELECT count(*) FROM ripple_events WHERE topic = $1", topic
    )
    assert stored == (1 if commit else 0)
    assert counter("events_published", topic_prefix=prefix) == before + (1 if commit else 0)


async def test_metrics__a_refused_start_batch_retried_run_by_run_counts_each_run_once(
    client: Client,
) -> None:
    name = unique("metric-batch")
    # Concurrent starts share group-commit batches; the version out of Postgres' int range
    # makes its batch fail as a whole, which is then retried start by start.
    starts = [client.start(name, {"i": i}) for i in range(8)]
    starts.insert(4, client.start(name, {"bad": True}, version=2**40))
    results = await asyncio.gather(*starts, return_exceptions=True)
    failed = [r for r in results if isinstance(r, BaseException)]
    assert len(failed) == 1
    assert isinstance(failed[0], RippleError), failed[0]
    assert "out of range" in str(failed[0]), failed[0]  # refused by Postgres, not before
    assert await runs_of(client, name) == 8
    assert started(name) == 8


async def test_metrics__a_bulk_retry_counts_every_run_it_retried(client: Client) -> None:
    name = unique("metric-retry")
    await client.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, status, started_at, completed_at) "
        "SELECT $1 || '-' || i, $1, 1, 'failed', now(), now() FROM generate_series(1, 3) AS i",
        name,
    )
    assert await client.retry_many(name) == 3
    assert started(name) == 3


@pytest.mark.parametrize("commit", [False, True], ids=["rolled-back", "committed"])
async def test_metrics__runs_a_publish_fans_out_count_as_started_once_committed(
    client: Client, commit: bool
) -> None:
    # Fan-out created runs without counting them in workflow_runs_started_total.
    name, other = unique("metric-fanout"), unique("metric-fanout-b")
    prefix = unique("fanout")
    await client.subscribe(f"{prefix}.*", WorkflowTarget(name))
    await client.subscribe(f"{prefix}.#", WorkflowTarget(other))
    await client.publish(f"{prefix}.one", {"n": 1})  # group-committed
    await asyncio.gather(*(client.publish(f"{prefix}.two", {"n": n}) for n in range(5)))
    assert (started(name), started(other)) == (6, 6)
    async with client.pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        await client.publish(f"{prefix}.three", {"n": 9}, conn=conn)
        assert started(name) == 6  # not committed yet
        await (tx.commit() if commit else tx.rollback())
    await assert_eventually(lambda: client.publisher.commit_watch.pending == 0)
    expected = 7 if commit else 6
    assert (await runs_of(client, name), started(name)) == (expected, expected)
    assert (await runs_of(client, other), started(other)) == (expected, expected)
