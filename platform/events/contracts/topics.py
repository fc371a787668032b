"""`Topics`: the topic schema registry as the client exposes it (`client.topics`)."""

from __future__ import annotations

from ripple.platform.core.db import Pool, map_errors
from ripple.platform.events.contracts import schema_store
from ripple.platform.events.contracts.records import SchemaVersion

__all__ = ["Topics"]


class Topics:
    """Topic schemas: register, check and read them (`client.topics`)."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def latest_schemas(self) -> list[SchemaVersion]:
        """The newest schema of every topic that has one, ordered by topic."""
        with map_errors():
            async with self._pool.acquire() as conn:
                return await schema_store.latest_schemas(conn)
