"""Test helpers: wait on conditions instead of sleeping; call the REST API in process; lay the
partitioned tables out as an installation partitioned since some day."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, overload
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

if TYPE_CHECKING:
    from ripple.platform.client import Client

T = TypeVar("T")


def with_database(url: str, name: str) -> str:
    """`url` pointing at database `name` (keeps host, user and query such as a socket dir)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@contextlib.asynccontextmanager
async def throwaway_database(admin_url: str, prefix: str) -> AsyncIterator[str]:
    """An empty database of its own on `admin_url`'s server (its URL), dropped on exit: for a
    test that migrates step by step, which a test database (already migrated) cannot do."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f"CREATE DATABASE {name}")
        try:
            yield with_database(admin_url, name)
        finally:
            await admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        await admin.close()


@overload
async def assert_eventually(
    check: Callable[[], Awaitable[T]], *, timeout: float = ..., interval: float = ...
) -> T: ...


@overload
async def assert_eventually(
    check: Callable[[], T], *, timeout: float = ..., interval: float = ...
) -> T: ...


async def assert_eventually(
    check: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.02
) -> Any:
    """Poll `check` until it returns a truthy value (returned) or raise AssertionError."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = check()
            if inspect.isawaitable(result):
                result = await result
            if result:
                return result
            last = result
        except AssertionError as exc:
            last = exc
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")
        await asyncio.sleep(interval)


def rest_client(client: Client) -> httpx.AsyncClient:
    """An HTTP client on the REST API of `client`, in process; an unhandled error answers 500
    as in production instead of raising into the test."""
    from ripple.platform.api.app import create_app

    transport = httpx.ASGITransport(app=create_app(client), raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://test")


#: The tables the sweeper partitions by time, in the order their locks are taken.
PARTITIONED = (
    "ripple_events",
    "ripple_webhook_deliveries",
    "ripple_webhook_attempts",
    "ripple_queue_dead_letters",
)
#: The partitioned tables whose key is a time, not a UUIDv7.
PARTITIONED_BY_TIME = ("ripple_queue_dead_letters",)


async def partitioned_since(conn: Any, start: datetime, ahead_days: int = 3) -> None:
    """Lay the partitioned tables (empty: a fresh database) out as an installation partitioned
    daily since `start`: one partition before it, then one a day up to `ahead_days` ahead."""
    async with conn.transaction():
        for parent in reversed(PARTITIONED):
            parts = await conn.fetch(
                "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
                "WHERE i.inhparent = $1::regclass",
                parent,
            )
            for part in parts:
                await conn.execute(f"ALTER TABLE {parent} DETACH PARTITION {part['relname']}")
                await conn.execute(f"DROP TABLE {part['relname']}")
            await conn.execute("DELETE FROM ripple_partitions WHERE parent = $1", parent)
            await conn.execute(
                f"CREATE TABLE {parent}_legacy (LIKE {parent} INCLUDING DEFAULTS "
                "INCLUDING CONSTRAINTS)"
            )
            bound = (
                start.isoformat()
                if parent in PARTITIONED_BY_TIME
                else await conn.fetchval("SELECT ripple_uuid7_floor($1)::text", start)
            )
            await conn.execute(
                f"ALTER TABLE {parent} ATTACH PARTITION {parent}_legacy "
                f"FOR VALUES FROM (MINVALUE) TO ('{bound}')"
            )
            await conn.execute(
                "INSERT INTO ripple_partitions (name, parent, lower, upper) "
                "VALUES ($1, $2, '-infinity', $3)",
                f"{parent}_legacy",
                parent,
                start,
            )
        await conn.execute(
            "SELECT ripple_partitions_ensure(interval '1 day', now() + make_interval(days => $1))",
            ahead_days,
        )


def csrf_of(html: str) -> str:
    """The CSRF token of a dashboard page's forms."""
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "the page has no CSRF field"
    return found.group(1)
