"""The topic schemas' SQL (`ripple_topic_schemas`, `ripple_topic_contracts`, migration 0019).
Every function takes a connection so callers compose one transaction."""

from __future__ import annotations

from typing import Any, Final, cast

from asyncpg import Record

from ripple.platform.core.db import Connection
from ripple.platform.events.contracts.records import Compatibility, SchemaVersion

__all__ = ["latest_schemas", "schema_versions"]

_LATEST: Final = """
SELECT DISTINCT ON (s.topic) s.topic, s.version, s.schema, s.created_at,
       coalesce(c.compatibility, 'backward') AS compatibility
FROM ripple_topic_schemas s
LEFT JOIN ripple_topic_contracts c ON c.topic = s.topic
ORDER BY s.topic, s.version DESC
"""


def _version(row: Record) -> SchemaVersion:
    return SchemaVersion(
        topic=row["topic"],
        version=row["version"],
        schema=cast(dict[str, Any], row["schema"]),
        compatibility=cast(Compatibility, row["compatibility"]),
        created_at=row["created_at"],
    )


async def latest_schemas(conn: Connection) -> list[SchemaVersion]:
    """The newest schema version of every topic that has one, by topic."""
    return [_version(row) for row in await conn.fetch(_LATEST)]


_VERSIONS: Final = """
SELECT s.topic, s.version, s.schema, s.created_at,
       coalesce(c.compatibility, 'backward') AS compatibility
FROM ripple_topic_schemas s
LEFT JOIN ripple_topic_contracts c ON c.topic = s.topic
WHERE s.topic = $1
ORDER BY s.version
LIMIT $2
"""


async def schema_versions(conn: Connection, topic: str, limit: int) -> list[SchemaVersion]:
    """Up to `limit` schema versions of `topic`, oldest first (for the topic catalogue)."""
    return [_version(row) for row in await conn.fetch(_VERSIONS, topic, limit)]
