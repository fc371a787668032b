"""RIPPLE_DB_TIMEOUT (the API's bound on a database call) must not cancel a
worker's healthy but slow writes. A journal commit or heartbeat that waits on a row lock for
longer than the API's timeout, but well within the lease, used to be cancelled: the recorded
step was executed again. Workers bound their writes by RIPPLE_WORKER_DB_TIMEOUT instead (default:
the lease, after which the write is fenced out anyway).

The slow commit is made deterministic with a row lock the test holds on the run while the step
result is committed.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import asyncpg

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.db import worker_db_timeout
from ripple.workflows import Worker, WorkflowContext, workflow
from tests.helpers import assert_eventually

EXECUTED: Counter[str] = Counter()
GATE: dict[str, asyncio.Event] = {}


async def _gated(run_id: str) -> str:
    EXECUTED[run_id] += 1
    await GATE[run_id].wait()
    return "done"


@workflow(name="slow-commit")
async def slow_commit(ctx: WorkflowContext) -> str:
    first = await ctx.step.run("gated", _gated, ctx.run_id)
    return await ctx.step.run("after", lambda: first + "!")


def test_worker_timeout_defaults_to_the_lease(settings: Settings) -> None:
    assert worker_db_timeout(settings.model_copy(update={"lease_seconds": 12.0})) == 12.0
    explicit = settings.model_copy(update={"lease_seconds": 12.0, "worker_db_timeout": 3.0})
    assert worker_db_timeout(explicit) == 3.0


async def test_slow_healthy_commit_is_not_cancelled(settings: Settings) -> None:
    quick = settings.model_copy(update={"db_timeout": 0.3, "lease_seconds": 6.0})
    async with Client(settings=quick) as client:
        handle = await client.start(slow_commit)
        GATE[handle.run_id] = asyncio.Event()
        holder = await asyncpg.connect(settings.database_url)
        try:
            async with Worker(client, [slow_commit], webhooks=False, sweeper=False):
                await assert_eventually(lambda: EXECUTED[handle.run_id] == 1)
                tx = holder.transaction()
                await tx.start()
                # Lock the run's row: the step's commit (and the heartbeat) waits behind it.
                await holder.execute(
                    "SELECT 1 FROM ripple_runs WHERE run_id = $1 FOR UPDATE", handle.run_id
                )
                GATE[handle.run_id].set()

                async def commit_waits() -> bool:
                    waiting = await holder.fetchval(
                        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND datname = current_database()"
                    )
                    return int(waiting) > 0

                await assert_eventually(commit_waits, timeout=10)
                # Longer than RIPPLE_DB_TIMEOUT, well within the lease: a healthy slow commit.
                await asyncio.sleep(quick.db_timeout * 4)
                await tx.rollback()
                assert await handle.result(timeout=30) == "done!"
        finally:
            await holder.close()
        assert EXECUTED[handle.run_id] == 1  # recorded once, never executed again
        run = await client.get_run(handle.run_id)
        assert run is not None
        assert run.attempt <= 1
