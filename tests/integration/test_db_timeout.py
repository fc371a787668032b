"""API calls give up on a stalled or locked database after
RIPPLE_DB_TIMEOUT with 503 + Retry-After, `/readyz` answers 503 at once during a stall, and
driver tracebacks during outages become structured warnings.

Outages are made without touching the shared Postgres: a table lock held by the test, or a
TCP proxy (tests/pgproxy.py) the test stalls or cuts. `asyncio.wait_for` bounds below are hang
guards (without the fix these calls never return), not timing assertions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

import asyncpg
import httpx
import pytest
from structlog.testing import capture_logs

from ripple.platform.client import Client
from ripple.platform.core import db
from ripple.platform.core.config import Settings
from ripple.platform.core.db import create_pool
from ripple.platform.core.logs import Repeats
from tests.helpers import assert_eventually, rest_client
from tests.pgproxy import PgProxy

GUARD = 30.0


@pytest.fixture(autouse=True)
def _fresh_warning_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Driver warnings are throttled per process; each test starts with none logged yet."""
    monkeypatch.setattr(db, "_repeats", Repeats(db.log))


def unavailable(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1"
    body: dict[str, Any] = response.json()
    assert body["type"].endswith("unavailable")
    assert "RIPPLE_DB_TIMEOUT" in body["detail"]
    return body


async def test_locked_table_gives_503_after_db_timeout(settings: Settings) -> None:
    quick = settings.model_copy(update={"db_timeout": 0.5})
    async with Client(settings=quick) as client, rest_client(client) as http:
        run_id = (await client.start("locked", {"n": 1})).run_id
        holder = await asyncpg.connect(settings.database_url)
        try:
            tx = holder.transaction()
            await tx.start()
            await holder.execute("LOCK TABLE ripple_runs IN ACCESS EXCLUSIVE MODE")
            got = await asyncio.wait_for(http.get(f"/v1/runs/{run_id}"), GUARD)
            unavailable(got)
            started = await asyncio.wait_for(
                http.post("/v1/workflows/locked/runs", json={"input": {"n": 2}}), GUARD
            )
            unavailable(started)
            await tx.rollback()
        finally:
            await holder.close()
        assert (await http.get(f"/v1/runs/{run_id}")).status_code == 200
        assert await client.pool.fetchval("SELECT count(*) FROM ripple_runs") == 1


async def test_stalled_database_gives_503_and_readyz_answers(
    settings: Settings, proxy: PgProxy
) -> None:
    through = settings.model_copy(update={"database_url": proxy.url, "db_timeout": 1.0})
    async with Client(settings=through) as client, rest_client(client) as http:
        assert (await http.get("/readyz")).status_code == 200
        proxy.stall()
        try:
            ready = await asyncio.wait_for(http.get("/readyz"), GUARD)
            assert ready.status_code == 503
            assert ready.json()["database"] is False
            # concurrent probes share one database probe and all answer
            answers = await asyncio.wait_for(
                asyncio.gather(*(http.get("/readyz") for _ in range(5))), GUARD
            )
            assert {a.status_code for a in answers} == {503}
            unavailable(await asyncio.wait_for(http.get("/v1/runs/nope"), GUARD))
        finally:
            proxy.resume()

        async def ready_again() -> bool:
            return (await http.get("/readyz")).status_code == 200

        await assert_eventually(ready_again, timeout=GUARD)
        assert (await http.get("/v1/runs/nope")).status_code == 404


async def test_reconnect_failures_are_one_structured_warning(
    settings: Settings, proxy: PgProxy
) -> None:
    through = settings.model_copy(
        update={"database_url": proxy.url, "pool_min_size": 2, "db_timeout": 1.0}
    )
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    logging.getLogger("asyncpg.pool").addHandler(keep)
    pool = await create_pool(through)
    try:
        with capture_logs() as logs:
            proxy.refuse()  # the server goes away: the pool keeps trying to reconnect

            async def warned() -> list[dict[str, Any]]:
                with contextlib.suppress(Exception):  # using the pool notices the loss
                    await pool.fetchval("SELECT 1")
                return [dict(e) for e in logs if e["event"] == "db_pool_reconnect_failed"]

            events = await assert_eventually(warned, timeout=GUARD)
            # the next attempt (1 s later) is counted, not logged
            await assert_eventually(lambda: _repeats_counted("db_pool_reconnect_failed"))
            assert len(await warned()) == 1
            assert events[0]["log_level"] == "warning"
            assert events[0]["error"]
        assert not [r for r in records if "connection floor" in r.getMessage()]
    finally:
        logging.getLogger("asyncpg.pool").removeHandler(keep)
        proxy.accept()
        await pool.close()


def _repeats_counted(event: str) -> bool:
    return db._repeats._count.get(event, 0) >= 1


async def test_unretrieved_driver_futures_are_one_structured_warning(
    settings: Settings,
) -> None:
    loop = asyncio.get_running_loop()
    passed_on: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: passed_on.append(context))
    pool = await create_pool(settings)
    try:
        lost = asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")
        with capture_logs() as logs:
            for _ in range(3):
                loop.call_exception_handler(
                    {"message": "Future exception was never retrieved", "exception": lost}
                )
            other = {"message": "Future exception was never retrieved", "exception": KeyError()}
            loop.call_exception_handler(other)
        assert [e["event"] for e in logs] == ["db_connection_lost"]
        assert passed_on == [other]  # anything else goes to the handler set before
    finally:
        await pool.close()
        loop.set_exception_handler(None)
