"""A database outage seen by the API: every call answers 503, and the log holds one warning
for the outage and one line when it ends, not a traceback per 503."""

from __future__ import annotations

import asyncio
from typing import Any

from structlog.testing import capture_logs

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from tests.helpers import assert_eventually, rest_client
from tests.pgproxy import PgProxy


async def test_database_outage__one_warning_and_one_recovery_line(
    settings: Settings, proxy: PgProxy
) -> None:
    through = settings.model_copy(update={"database_url": proxy.url, "db_timeout": 1.0})
    async with Client(settings=through) as client, rest_client(client) as http:
        assert (await http.get("/v1/runs/nope")).status_code == 404
        with capture_logs() as entries:
            proxy.refuse()
            answers = [await asyncio.wait_for(http.get("/v1/runs/nope"), 30) for _ in range(8)]
            answers.append(
                await asyncio.wait_for(
                    http.post("/v1/topics/outage.check/events", json={"payload": {}}), 30
                )
            )
            assert {a.status_code for a in answers} == {503}
            proxy.accept()

            def recovered() -> list[Any]:
                return [e for e in entries if e["event"] == "api_recovered"]

            (end,) = await assert_eventually(recovered, timeout=30)
        assert (await http.get("/v1/runs/nope")).status_code == 404
    api = [e for e in entries if e["event"].startswith("api_")]
    assert [(e["event"], e["log_level"]) for e in api] == [
        ("api_unavailable", "warning"),
        ("api_recovered", "info"),
    ]
    assert api[0]["path"] == "/v1/runs/nope"
    assert api[0]["error"].startswith("Unavailable: ")
    assert "exc_info" not in api[0]
    assert end["failures"] == len(answers)
    assert end["duration_s"] >= 0
