"""The topic schemas' SQL (`ripple_topic_schemas`, `ripple_topic_contracts`, migration 0019).
Every function takes a connection so callers compose one transaction."""

from __future__ import annotations

from typing import Any, Final, cast

from asyncpg import Record

from ripple.platform.core.db import Connection
from ripple.platform.events.contracts.records import Compatibility, SchemaVersion

__all__ = [
    "find_by_fingerprint",
    "get_schema",
    "insert_schema",
    "latest_schemas",
    "list_schemas",
    "lock_topic",
    "schema_count",
    "set_compatibility",
]

_LATEST: Final = """
SELECT DISTINCT ON (s.topic) s.topic, s.version, s.schema, s.created_at,
       coalesce(c.compatibility, 'backward') AS compatibility
FROM ripple_topic_schemas s
LEFT JOIN ripple_topic_contracts c ON c.topic = s.topic
ORDER BY s.topic, s.version DESC
"""

# $1 topic, $2 compatibility or NULL (keep the current one). Creates the topic's contract row
# if needed and locks it until the transaction ends: concurrent registrations of one topic
# take their version numbers one after the other. Returns the topic's mode.
LOCK_TOPIC: Final = """
INSERT INTO ripple_topic_contracts (topic, compatibility)
VALUES ($1, coalesce($2, 'backward'))
ON CONFLICT (topic) DO UPDATE
SET compatibility = coalesce($2, ripple_topic_contracts.compatibility)
RETURNING compatibility
"""
# $1 topic, $2 compatibility
SET_COMPATIBILITY: Final = """
INSERT INTO ripple_topic_contracts (topic, compatibility) VALUES ($1, $2)
ON CONFLICT (topic) DO UPDATE SET compatibility = EXCLUDED.compatibility
"""
# $1 topic, $2 fingerprint
SELECT_BY_FINGERPRINT: Final = """
SELECT s.topic, s.version, s.schema, s.created_at,
       coalesce(c.compatibility, 'backward') AS compatibility
FROM ripple_topic_schemas s LEFT JOIN ripple_topic_contracts c ON c.topic = s.topic
WHERE s.topic = $1 AND s.fingerprint = $2
"""
# $1 topic: every version, oldest first
SELECT_VERSIONS: Final = """
SELECT s.topic, s.version, s.schema, s.created_at,
       coalesce(c.compatibility, 'backward') AS compatibility
FROM ripple_topic_schemas s LEFT JOIN ripple_topic_contracts c ON c.topic = s.topic
WHERE s.topic = $1 ORDER BY s.version
"""
# $1 topic, $2 version (NULL: the latest)
SELECT_VERSION: Final = """
SELECT s.topic, s.version, s.schema, s.created_at,
       coalesce(c.compatibility, 'backward') AS compatibility
FROM ripple_topic_schemas s LEFT JOIN ripple_topic_contracts c ON c.topic = s.topic
WHERE s.topic = $1 AND ($2::int IS NULL OR s.version = $2)
ORDER BY s.version DESC LIMIT 1
"""
# $1 topic, $2 schema (JSON), $3 fingerprint: the next version number of the topic (the caller
# holds the topic's lock)
INSERT_SCHEMA: Final = """
WITH inserted AS (
    INSERT INTO ripple_topic_schemas (topic, version, schema, fingerprint)
    SELECT $1, coalesce(max(version), 0) + 1, $2::jsonb, $3
    FROM ripple_topic_schemas WHERE topic = $1
    RETURNING topic, version, schema, created_at
)
SELECT s.topic, s.version, s.schema, s.created_at,
       coalesce(c.compatibility, 'backward') AS compatibility
FROM inserted s LEFT JOIN ripple_topic_contracts c ON c.topic = s.topic
"""


def _version(row: Record) -> SchemaVersion:
    return SchemaVersion(
        topic=row["topic"],
        version=row["version"],
        schema=cast(dict[str, Any], row["schema"]),
        compatibility=cast(Compatibility, row["compatibility"]),
        created_at=row["created_at"],
    )


async def schema_count(conn: Connection) -> int:
    """How many schema versions exist: versions are only ever added, so an unchanged count
    means unchanged schemas (a cache checks it before re-reading them all)."""
    return cast(int, await conn.fetchval("SELECT count(*) FROM ripple_topic_schemas"))


async def latest_schemas(conn: Connection) -> list[SchemaVersion]:
    """The newest schema version of every topic that has one, by topic."""
    return [_version(row) for row in await conn.fetch(_LATEST)]


async def lock_topic(
    conn: Connection, topic: str, compatibility: Compatibility | None
) -> Compatibility:
    """Lock `topic`'s contract until the transaction ends (setting its mode when given); its
    mode."""
    return cast(Compatibility, await conn.fetchval(LOCK_TOPIC, topic, compatibility))


async def set_compatibility(conn: Connection, topic: str, compatibility: Compatibility) -> None:
    await conn.execute(SET_COMPATIBILITY, topic, compatibility)


async def find_by_fingerprint(
    conn: Connection, topic: str, fingerprint: str
) -> SchemaVersion | None:
    row = await conn.fetchrow(SELECT_BY_FINGERPRINT, topic, fingerprint)
    return None if row is None else _version(row)


async def list_schemas(conn: Connection, topic: str) -> list[SchemaVersion]:
    """Every version of `topic`, oldest first."""
    return [_version(row) for row in await conn.fetch(SELECT_VERSIONS, topic)]


async def get_schema(conn: Connection, topic: str, version: int | None) -> SchemaVersion | None:
    """One version of `topic` (the latest when `version` is None)."""
    row = await conn.fetchrow(SELECT_VERSION, topic, version)
    return None if row is None else _version(row)


async def insert_schema(
    conn: Connection, topic: str, schema: dict[str, Any], fingerprint: str
) -> SchemaVersion:
    """Store `schema` as `topic`'s next version (hold `lock_topic` first)."""
    row = await conn.fetchrow(INSERT_SCHEMA, topic, schema, fingerprint)
    assert row is not None
    return _version(row)
