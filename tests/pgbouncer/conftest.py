"""The core end-to-end and integration tests again, with every Ripple connection going through
a real PgBouncer in `pool_mode=transaction` (Debian's `pgbouncer`, started here on a free
loopback port in front of the test Postgres).

The modules in this folder import test functions from tests/e2e and tests/integration; pytest
collects them here, so these fixtures apply: `database_url` is the test database *through
PgBouncer*, `settings` say `RIPPLE_DATABASE_POOLER=transaction` with the direct URL beside it,
and `ripple_env` does the same for `ripple` subprocesses.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from ripple.platform.core.config import Settings, load_settings
from tests.conftest import DatabaseDropper, _admin
from tests.e2e.conftest import (  # noqa: F401  (fixtures used by the imported e2e tests)
    api_server,
    module_database_url,
    ripple_cli,
    ripple_environment,
    worker_process,
)
from tests.helpers import with_database
from tests.integration.subscribers.conftest import hook_settings, hooks  # noqa: F401
from tests.integration.workflows.conftest import app  # noqa: F401
from tests.servers import PgBouncer

if shutil.which("pgbouncer") is None and not shutil.which("/usr/sbin/pgbouncer"):
    pytest.fail(
        "pgbouncer is missing: `make setup` installs it (apt-get install pgbouncer)",
        pytrace=False,
    )


def server_address(url: str) -> tuple[str, int]:
    """Where PgBouncer reaches the Postgres of `url`: a TCP host, or the Unix socket directory
    of an embedded Postgres (`postgresql://postgres:@/postgres?host=/dir`), and its port."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    host = parts.hostname or query.get("host", ["/var/run/postgresql"])[0]
    return host, parts.port or int(query.get("port", ["5432"])[0])


def through(bouncer: PgBouncer, url: str) -> str:
    """`url`'s database, reached through `bouncer`."""
    return bouncer.url(urlsplit(url).path.lstrip("/"))


@pytest.fixture(scope="session")
def pgbouncer(pg_admin_url: str) -> Iterator[PgBouncer]:
    """One PgBouncer for the session, in front of the test Postgres (every database)."""
    bouncer = PgBouncer(*server_address(pg_admin_url))
    bouncer.start()
    yield bouncer
    bouncer.stop()


@pytest.fixture
async def direct_database_url(
    pg_admin_url: str, template_db: str, pgbouncer: PgBouncer, drop_database: DatabaseDropper
) -> AsyncIterator[str]:
    """The test database, reached directly (the RIPPLE_DATABASE_DIRECT_URL)."""
    name = f"b_{uuid.uuid4().hex[:16]}"
    await _admin(pg_admin_url, f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"')
    try:
        yield with_database(pg_admin_url, name)
    finally:
        drop_database.drop(name)


@pytest.fixture
def database_url(direct_database_url: str, pgbouncer: PgBouncer) -> str:
    """The test database through PgBouncer (what the tests' clients connect to)."""
    return through(pgbouncer, direct_database_url)


@pytest.fixture
def settings(
    database_url: str, direct_database_url: str, redis_url: str, redis_prefix: str
) -> Settings:
    return load_settings(
        database_url=database_url,
        database_direct_url=direct_database_url,
        database_pooler="transaction",
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        poll_interval=0.25,
        lease_seconds=5.0,
        shutdown_grace=2.0,
        pool_min_size=1,
        pool_max_size=10,
    )


@pytest.fixture(scope="module")
def ripple_env(
    module_database_url: str,  # noqa: F811 (the fixture imported above)
    redis_url: str,
    pgbouncer: PgBouncer,
) -> dict[str, str]:
    """`ripple` processes connect through PgBouncer; migrations would use the direct URL."""
    return ripple_environment(
        through(pgbouncer, module_database_url),
        redis_url,
        RIPPLE_DATABASE_DIRECT_URL=module_database_url,
        RIPPLE_DATABASE_POOLER="transaction",
    )
