"""A worker outlives database outages: it starts while Postgres is down and waits for it, a
broken connection is a transient error, and a helper that dies of a bug stops the worker loudly
instead of letting leases lapse unnoticed."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from structlog.testing import capture_logs

from ripple.platform.core.config import Settings, load_settings
from ripple.platform.core.db import map_errors
from ripple.platform.errors import Unavailable
from ripple.workflows import WorkflowContext, workflow
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App, close_app, make_app
from tests.servers import PostgresCluster


@workflow(name="outage-one-step")
async def one_step(ctx: WorkflowContext) -> int:
    return int(await ctx.step.run("one", lambda: 1))


def test_broken_connection_state__is_a_transient_error() -> None:
    """The driver's protocol-state error (a statement sent after a restarting server's FATAL
    message, before the socket closed) maps to `Unavailable`, which every loop retries."""
    with pytest.raises(Unavailable, match="retry"), map_errors():
        raise asyncpg.InternalClientError(
            "cannot switch to state 12; another operation (2) is in progress"
        )


async def test_worker_started_while_postgres_is_down__waits_and_then_runs(
    cluster: PostgresCluster, redis_url: str, redis_prefix: str
) -> None:
    settings: Settings = load_settings(
        database_url=cluster.url,
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        poll_interval=0.1,
        lease_seconds=5.0,
        shutdown_grace=2.0,
        pool_min_size=1,
        pool_max_size=4,
        db_timeout=2.0,
    )
    app: App = await make_app(settings)  # migrates while the server is up
    try:
        handle = await app.workflows.start(one_step)
        await app.pool.close()
        cluster.stop()
        worker = app.worker(one_step, concurrency=2)
        with capture_logs() as logs:
            running = asyncio.create_task(worker.run())
            await assert_eventually(
                lambda: any(e["event"] == "worker_start_failed" for e in logs), timeout=30
            )
        assert not running.done()
        await asyncio.to_thread(cluster.start)
        app.pool = await asyncpg.create_pool(cluster.url, min_size=1, max_size=2)
        await assert_eventually(
            lambda: app.pool.fetchval(
                "SELECT status = 'completed' FROM ripple_runs WHERE run_id = $1", handle.run_id
            ),
            timeout=30,
        )
        worker.stop()
        await asyncio.wait_for(running, 30)
    finally:
        await close_app(app)


async def test_worker_helper_dying_of_a_bug__stops_the_worker_with_its_error(app: App) -> None:
    worker = app.worker(one_step)

    async def buggy_beat() -> list[object]:
        raise RuntimeError("bug in the heartbeat")

    worker.heartbeat.beat = buggy_beat  # type: ignore[method-assign,assignment]
    worker.heartbeat.interval = 0.05
    with pytest.raises(RuntimeError, match="bug in the heartbeat"):
        await asyncio.wait_for(worker.run(), 10)
