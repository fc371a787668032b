"""`Environment`: a throwaway database, a connected client and an in-process worker for one
test, and `fire_timers` to skip sleeps and wait timeouts."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import tempfile
import uuid
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from ripple.platform.client import Client
from ripple.platform.core import migrate
from ripple.platform.core.config import load_settings
from ripple.platform.core.db import create_pool
from ripple.platform.core.embedded import EmbeddedServices, start_embedded
from ripple.platform.errors import RippleError
from ripple.workflows.authoring.definition import WorkflowDefinition
from ripple.workflows.runs.records import ACTIVE
from ripple.workflows.runtime.worker import Worker

__all__ = ["Environment"]

#: The embedded Postgres shared by every Environment of this process without a server.
_embedded: list[EmbeddedServices] = []


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def _embedded_server() -> str:
    if not _embedded:
        directory = tempfile.mkdtemp(prefix="ripple-testing-")
        _embedded.append(start_embedded(directory, redis=False))
    return _embedded[0].database_url


async def _admin(url: str, statement: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def _template(server: str) -> str:
    """A database on `server` with this build's migrations applied, named after their
    checksums: built once (under a temporary name, renamed when complete) and cloned by every
    Environment, so a test pays a copy instead of the migrations."""
    digest = hashlib.sha256(
        "".join(f"{m.version}:{m.checksum}" for m in migrate.load_migrations()).encode()
    ).hexdigest()[:16]
    name = f"ripple_testing_tpl_{digest}"
    conn = await asyncpg.connect(server)
    try:
        if await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            return name
        building = f"{name}_{uuid.uuid4().hex[:8]}"
        await conn.execute(f'CREATE DATABASE "{building}"')
        settings = load_settings(database_url=_with_database(server, building), redis_url=None)
        pool = await create_pool(settings, min_size=0, max_size=1)
        try:
            await migrate.apply_migrations(pool)
        finally:
            await pool.close()
        try:
            await conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        except asyncpg.DuplicateDatabaseError:  # another process built it meanwhile
            await conn.execute(f'DROP DATABASE IF EXISTS "{building}"')
        return name
    finally:
        await conn.close()


class Environment:
    """A throwaway database on `database_url`'s server (the embedded Postgres when None), a
    connected `client` and a worker executing `workflows` in this process; all gone on exit.

        async with Environment([onboarding]) as env:
            handle = await env.client.start(onboarding, {"userId": 1})
            await env.fire_timers(handle.run_id)
            assert (await handle.result(timeout=5))["verified"]

    `settings` overrides settings (`poll_interval`, `lease_seconds`, ...).
    """

    def __init__(
        self,
        workflows: Sequence[WorkflowDefinition[Any, Any]],
        database_url: str | None = None,
        **settings: Any,
    ) -> None:
        self.workflows = list(workflows)
        self._server_url = database_url
        self._overrides = settings
        self._database: str | None = None
        self._server = ""
        self._name = ""
        self._client: Client | None = None
        self._worker: Worker | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RippleError("the environment is not running: use `async with Environment(...)`")
        return self._client

    @property
    def database_url(self) -> str:
        """The throwaway database's URL."""
        if self._database is None:
            raise RippleError("the environment is not running: use `async with Environment(...)`")
        return self._database

    async def __aenter__(self) -> Self:
        server = self._server_url
        if server is None:
            server = await asyncio.to_thread(_embedded_server)
        name = f"ripple_test_{uuid.uuid4().hex[:16]}"
        template = await _template(server)
        await _admin(server, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
        self._server = server
        self._name = name
        self._database = _with_database(server, name)
        try:
            options: dict[str, Any] = {
                "database_url": self._database,
                "redis_url": None,
                "poll_interval": 0.2,
                "pool_min_size": 1,
                "pool_max_size": 5,
                "shutdown_grace": 1.0,
            }
            settings = load_settings(**(options | self._overrides))
            client = Client(settings=settings)
            await client.connect()
            self._client = client
            client.workflows.register(*self.workflows)
            self._worker = Worker(client, self.workflows, sweeper=False, handle_signals=False)
            await self._worker.__aenter__()
        except BaseException:
            await self._teardown()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._teardown()

    async def _teardown(self) -> None:
        try:
            if self._worker is not None:
                worker, self._worker = self._worker, None
                await worker.__aexit__(None, None, None)
            if self._client is not None:
                client, self._client = self._client, None
                await client.close()
        finally:
            if self._database is not None:
                self._database = None
                with contextlib.suppress(OSError, asyncpg.PostgresError):
                    await _admin(
                        self._server, f'DROP DATABASE IF EXISTS "{self._name}" WITH (FORCE)'
                    )

    async def settle(self, run_id: str | None = None, *, timeout: float = 10.0) -> None:
        """Wait until the run (every active run when None) is at rest: ended, or parked and
        not due now. Raises TimeoutError after `timeout` seconds."""
        run_ids = [run_id] if run_id is not None else await self._active_runs()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        for rid in run_ids:
            while True:
                if await self.client.deploys.settled(rid):
                    break
                if loop.time() >= deadline:
                    raise TimeoutError(f"run {rid} did not come to rest within {timeout} s")
                await asyncio.sleep(0.02)

    async def fire_timers(self, run_id: str | None = None, *, settle: float = 10.0) -> int:
        """Fire every pending sleep and wait timeout now (of `run_id`, else of every active
        run), journaled as fired early; the number of runs woken. Waits up to `settle` seconds
        for the runs to come to rest first (see `settle`)."""
        run_ids = [run_id] if run_id is not None else await self._active_runs()
        woken = 0
        for rid in run_ids:
            await self.settle(rid, timeout=settle)
            if await self.client.wake(rid):
                woken += 1
        return woken

    async def _active_runs(self) -> list[str]:
        # One listing of every run (a run moving between statuses is never missed).
        out: list[str] = []
        cursor = None
        while True:
            page = await self.client.list_runs(limit=500, cursor=cursor)
            out += [r.run_id for r in page.items if r.status in ACTIVE]
            cursor = page.next_cursor
            if cursor is None:
                return out
