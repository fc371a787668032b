"""The topic schema cache publish validates against: read on a cache miss (start, a
registration, a hint, the poll interval), not once per publish."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.errors import InvalidInput
from ripple.platform.events.contracts import schema_store
from tests.helpers import assert_eventually


@pytest.fixture
def settings(settings: Settings) -> Settings:
    # A poll interval longer than the test: no read below is the poll's.
    return settings.model_copy(update={"poll_interval": 60.0})


@pytest.fixture
def schema_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the reads of every latest schema (one element per read)."""
    reads: list[int] = []
    latest = schema_store.latest_schemas

    async def counted(conn: Any) -> Any:
        reads.append(1)
        return await latest(conn)

    monkeypatch.setattr(schema_store, "latest_schemas", counted)
    return reads


async def test_contracts_cache__publishes_read_the_schemas_on_a_miss_not_each_time(
    client: Client, schema_reads: list[int]
) -> None:
    # The first publish len(schema_reads); the change listener's start may wake the cache once more.
    for n in range(20):
        await client.publish("no.schema", {"n": n})
    assert 1 <= len(schema_reads) <= 2

    before = len(schema_reads)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    await client.topics.register_schema("with.schema", schema)
    with pytest.raises(InvalidInput, match="/n"):
        await client.publish("with.schema", {"n": "x"})
    for n in range(20):
        await client.publish("with.schema", {"n": n})
        await client.publish("no.schema", {"n": n})
    # The registration drops the cache here and its hint comes back to this process too.
    assert 1 <= len(schema_reads) - before <= 2


async def test_contracts_cache__a_poll_rereads_only_when_a_version_was_added(
    settings: Settings, schema_reads: list[int]
) -> None:
    """Without wake-ups (no Redis) each poll interval checks the schemas: it counts the
    versions and re-len(schema_reads) them only when another process registered one."""
    quick = settings.model_copy(update={"redis_url": None, "poll_interval": 0.05})
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    async with Client(settings=quick) as publisher, Client(settings=quick) as other:
        await publisher.publish("polled", {"n": 1})
        first = len(schema_reads)
        for n in range(5):  # polls come and go: nothing changed, nothing re-read
            await asyncio.sleep(0.06)
            await publisher.publish("polled", {"n": n})
        assert len(schema_reads) == first

        # Another process registers a version; its hint cannot reach this one (no Redis).
        await other.topics.register_schema("polled", schema)

        async def refused() -> bool:
            try:
                await publisher.publish("polled", {"n": "x"})
            except InvalidInput:
                return True
            return False

        await assert_eventually(refused, timeout=10, interval=0.05)
        assert len(schema_reads) > first
