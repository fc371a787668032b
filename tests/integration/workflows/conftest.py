"""Fixtures for workflow integration tests: a minimal platform client (pool + waker +
WorkflowClient) so these tests depend on the workflow runtime only."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool, create_pool
from ripple.platform.core.migrate import apply_migrations
from ripple.platform.core.wake import NullWaker, create_waker
from ripple.platform.ops.services import BackgroundService
from ripple.workflows import Worker, WorkflowDefinition
from ripple.workflows.runs.client import WorkflowClient


@dataclass
class App:
    """Satisfies `ripple.workflows.runtime.worker.WorkerClient`."""

    pool: Pool
    waker: NullWaker
    settings: Settings
    workflows: WorkflowClient
    services: list[BackgroundService] = field(default_factory=list)

    def background_services(self, *, webhooks: bool, sweeper: bool) -> list[BackgroundService]:
        return list(self.services)

    def worker(self, *defs: WorkflowDefinition[Any, Any], concurrency: int = 20) -> Worker:
        return Worker(self, list(defs), concurrency=concurrency)


async def make_app(settings: Settings) -> App:
    pool = await create_pool(settings)
    await apply_migrations(pool)
    waker = create_waker(
        settings.redis_endpoint(),
        prefix=settings.redis_prefix,
        poll_interval=settings.poll_interval,
    )
    await waker.start()
    return App(pool, waker, settings, WorkflowClient(pool, waker, settings))


async def close_app(app: App) -> None:
    await app.waker.close()
    await app.pool.close()


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[App]:
    made = await make_app(settings)
    try:
        yield made
    finally:
        await close_app(made)
