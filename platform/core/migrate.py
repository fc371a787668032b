"""Applies the SQL migrations in `infra/sql/` (package `ripple.sql`) in order, exactly once.

Each migration runs in its own transaction (unless its first line is
`-- ripple: no-transaction`) under a session advisory lock, so any number of processes may start
at once. Applied versions are recorded with a checksum; an edited migration is refused.
Behind a transaction-mode pooler the session lock cannot hold (the server connection changes
between statements), so `migrate_database` takes it on `RIPPLE_DATABASE_DIRECT_URL`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool, create_pool, map_errors, pooled
from ripple.platform.core.logs import get_logger
from ripple.platform.errors import ConfigError

__all__ = [
    "Migration",
    "apply_migrations",
    "load_migrations",
    "migrate_database",
    "parse_migration_name",
    "pending_migrations",
]

log = get_logger("ripple.migrate")

# Arbitrary constant shared by every Ripple process: "ripple" in ASCII.
_LOCK_KEY = 0x726970706C65
#: Statement timeout (seconds) of the migration lock wait and of migrations themselves.
_SLOW = 24 * 3600.0
# Matched whole (`fullmatch`): with `match`, `$` also matches before a final newline.
_NAME = re.compile(r"([0-9]{4})_([a-z0-9_]+)\.sql")
_NO_TX = "-- ripple: no-transaction"

CREATE_TABLE = """
CREATE TABLE IF NOT EXISTS ripple_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""
# $1 version, $2 name, $3 checksum
INSERT_APPLIED = "INSERT INTO ripple_migrations (version, name, checksum) VALUES ($1, $2, $3)"
SELECT_APPLIED = "SELECT version, name, checksum FROM ripple_migrations ORDER BY version"
TABLE_EXISTS = "SELECT to_regclass('ripple_migrations') IS NOT NULL"


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def transactional(self) -> bool:
        return not self.sql.lstrip().startswith(_NO_TX)


def parse_migration_name(filename: str) -> tuple[int, str] | None:
    """(version, name) of a migration file `NNNN_snake_name.sql`; None for any other file."""
    match = _NAME.fullmatch(filename)
    return (int(match[1]), match[2]) if match else None


def load_migrations() -> list[Migration]:
    """The migrations shipped in `ripple.sql`, in version order."""
    found: list[Migration] = []
    for entry in resources.files("ripple.sql").iterdir():
        parsed = parse_migration_name(entry.name)
        if parsed is not None:
            found.append(Migration(*parsed, entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise ConfigError(f"duplicate migration versions in ripple.sql: {versions}")
    return found


async def _applied(conn: Connection) -> dict[int, tuple[str, str]]:
    if not await conn.fetchval(TABLE_EXISTS):
        return {}
    rows = await conn.fetch(SELECT_APPLIED)
    return {row["version"]: (row["name"], row["checksum"]) for row in rows}


def _check(migrations: list[Migration], applied: dict[int, tuple[str, str]]) -> list[Migration]:
    known = {m.version for m in migrations}
    for version in applied:
        if version not in known:
            raise ConfigError(
                f"database has migration {version} that this Ripple does not ship: "
                "upgrade this process to the version that applied it"
            )
    pending = []
    for m in migrations:
        if m.version in applied:
            if applied[m.version][1] != m.checksum:
                raise ConfigError(
                    f"migration {m.version:04d}_{m.name}.sql was edited after it was applied; "
                    "migrations are forward-only: restore it and add a new one"
                )
        else:
            pending.append(m)
    return pending


async def pending_migrations(pool: Pool, migrations: list[Migration] | None = None) -> int:
    """How many migrations are not applied yet (raises if the database disagrees)."""
    migrations = load_migrations() if migrations is None else migrations
    with map_errors():
        async with pool.acquire() as conn:
            return len(_check(migrations, await _applied(conn)))


async def apply_migrations(pool: Pool, migrations: list[Migration] | None = None) -> int:
    """Apply pending migrations; return how many were applied. Safe to run concurrently."""
    migrations = load_migrations() if migrations is None else migrations
    with map_errors():
        async with pool.acquire() as conn:
            # Fast path: nothing to do, no lock taken.
            if not _check(migrations, await _applied(conn)):
                return 0
            # Waiting for another process's migrations, and migrating, may take longer than
            # RIPPLE_DB_TIMEOUT (the pool's statement timeout): these statements have their own.
            await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY, timeout=_SLOW)
            try:
                await conn.execute(CREATE_TABLE)
                pending = _check(migrations, await _applied(conn))
                for m in pending:
                    if m.transactional:
                        async with conn.transaction():
                            await conn.execute(m.sql, timeout=_SLOW)
                            await conn.execute(INSERT_APPLIED, m.version, m.name, m.checksum)
                    else:
                        await conn.execute(m.sql, timeout=_SLOW)
                        await conn.execute(INSERT_APPLIED, m.version, m.name, m.checksum)
                    log.info("migration_applied", version=m.version, name=m.name)
                return len(pending)
            finally:
                await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)


async def migrate_database(settings: Settings, pool: Pool) -> int:
    """Apply pending migrations for a process whose pool is `pool` (on `database_url`).

    Directly connected, that pool does it. Behind a transaction-mode pooler the check runs on
    `pool` (no lock when nothing is pending) and the migrations on a short-lived connection to
    `database_direct_url`, because the migration lock is a session lock.
    """
    if not pooled(settings):
        return await apply_migrations(pool)
    if not await pending_migrations(pool):
        return 0
    if settings.database_direct_url is None:
        raise ConfigError(
            "migrations are pending and RIPPLE_DATABASE_URL goes through a transaction-mode "
            "pooler (RIPPLE_DATABASE_POOLER=transaction), where the migration lock cannot "
            "hold: set RIPPLE_DATABASE_DIRECT_URL to a URL that reaches Postgres directly"
        )
    direct = await create_pool(
        settings, dsn=settings.database_direct_url, direct=True, min_size=1, max_size=1
    )
    try:
        return await apply_migrations(direct)
    finally:
        await direct.close()
