"""RIPPLE_DATABASE_READ_URL against a real streaming replica: a throwaway primary cluster, a
second cluster made from it by `pg_basebackup -R`, and a Client whose list calls read the
replica while everything else uses the primary.

Which server answered is proven, not assumed: with WAL replay paused on the replica, a run
created on the primary is found by `get_run` (primary) and not by `list_runs` (replica) until
replay resumes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import load_settings
from ripple.workflows import WorkflowContext, workflow
from tests.helpers import assert_eventually
from tests.servers import PostgresCluster

pytestmark = pytest.mark.timeout(180)


@workflow(name="replicated")
async def replicated(ctx: WorkflowContext, n: int) -> int:
    return n


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[PostgresCluster, PostgresCluster]]:
    primary = PostgresCluster()
    replica: PostgresCluster | None = None
    try:
        primary.start()
        replica = PostgresCluster(replica_of=primary)
        replica.start()
        yield primary, replica
    finally:
        if replica is not None:
            replica.remove()
        primary.remove()


async def _sql(url: str, statement: str) -> Any:
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(statement)
    finally:
        await conn.close()


@pytest.fixture
async def replicated_client(
    clusters: tuple[PostgresCluster, PostgresCluster], redis_url: str, redis_prefix: str
) -> AsyncIterator[Client]:
    primary, replica = clusters
    settings = load_settings(
        database_url=primary.url,
        database_read_url=replica.url,
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        pool_min_size=1,
        pool_max_size=4,
    )
    async with Client(settings=settings) as client:
        yield client
    await _sql(replica.url, "SELECT pg_wal_replay_resume()")


async def _caught_up(primary: str, replica: str) -> bool:
    target = await _sql(primary, "SELECT pg_current_wal_lsn()::text")
    return bool(await _sql(replica, f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"))


async def test_read_replica__list_calls_read_the_replica(
    clusters: tuple[PostgresCluster, PostgresCluster], replicated_client: Client
) -> None:
    primary, replica = clusters
    client = replicated_client
    assert await _sql(replica.url, "SELECT pg_is_in_recovery()") is True
    first = await client.start(replicated, 1)
    await assert_eventually(lambda: _caught_up(primary.url, replica.url))
    assert [r.run_id for r in (await client.list_runs("replicated")).items] == [first.run_id]

    await _sql(replica.url, "SELECT pg_wal_replay_pause()")
    second = await client.start(replicated, 2)
    assert await client.get_run(second.run_id) is not None  # the primary has it
    listed = [r.run_id for r in (await client.list_runs("replicated")).items]
    assert listed == [first.run_id]  # the replica does not, yet
    assert (await client.deliveries.list()).items == []

    await _sql(replica.url, "SELECT pg_wal_replay_resume()")

    async def both_listed() -> bool:
        page = await client.list_runs("replicated")
        return {r.run_id for r in page.items} == {first.run_id, second.run_id}

    await assert_eventually(both_listed)


async def test_read_replica__the_read_pool_is_read_only(replicated_client: Client) -> None:
    with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
        async with replicated_client.read_pool.acquire() as conn:
            await conn.execute("CREATE TABLE nope (id int)")
