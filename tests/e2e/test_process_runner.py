"""`ripple worker` and `ripple dev` run their services with one `ProcessRunner`: SIGTERM stops
every one of them gracefully (each returns on its own), the process exits 0, and the runner
(not library code) froze the startup objects for the GC once everything was up."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path
from typing import Any

import asyncpg

from ripple.platform.ops.runner import GC_YOUNG_THRESHOLD
from tests.e2e.conftest import REPO_ROOT, Process
from tests.servers import free_port

WORKER_SERVICES = ["workflow-executor", "webhook-dispatcher", "sweeper", "scheduler"]


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


async def _workers(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM ripple_workers"))
    finally:
        await conn.close()


async def test_ripple_worker__sigterm_stops_every_service_and_exits_0(
    ripple_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**ripple_env, "RIPPLE_LOG_LEVEL": "info"}
    worker = Process(
        ["worker", "--app", "tests.e2e.shutdown_app"], env, REPO_ROOT, tmp_path / "worker.log"
    )
    try:
        await asyncio.to_thread(worker.wait_output, "ripple worker running")
        assert await _workers(env["RIPPLE_DATABASE_URL"]) == 1
        code = await asyncio.to_thread(worker.stop, signal.SIGTERM, 30)
        assert code == 0, worker.text()[-3000:]
    finally:
        worker.stop(timeout=1)
    events = _events(worker.text())
    names = [e["event"] for e in events]
    assert [e["signal"] for e in events if e["event"] == "process_signal"] == ["SIGTERM"]
    stopped = {e["service"]: e["outcome"] for e in events if e["event"] == "service_stopped"}
    assert stopped == dict.fromkeys(WORKER_SERVICES, "returned")
    assert "service_failed" not in names
    (frozen,) = [e for e in events if e["event"] == "gc_frozen"]
    assert frozen["objects"] > 0
    assert frozen["young_threshold"] == GC_YOUNG_THRESHOLD
    # frozen once startup was done: after the worker had registered and warmed its pool
    assert names.index("worker_started") < names.index("gc_frozen")
    assert names.index("webhook_dispatcher_stopped") < names.index("process_stopped")
    assert await _workers(env["RIPPLE_DATABASE_URL"]) == 0  # the executor unregistered


async def test_ripple_dev__sigterm_stops_the_api_and_the_worker_services(
    ripple_env: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    env = {**ripple_env, "RIPPLE_LOG_LEVEL": "debug"}  # `ripple dev` logs to the console
    dev = Process(
        ["dev", "--app", "tests.e2e.shutdown_app", "--port", str(port)],
        env,
        REPO_ROOT,
        tmp_path / "dev.log",
    )
    try:
        await asyncio.to_thread(dev.wait_output, "ripple dev is running")
        code = await asyncio.to_thread(dev.stop, signal.SIGTERM, 30)
        assert code == 0, dev.text()[-3000:]
    finally:
        dev.stop(timeout=1)
    text = dev.text()
    for service in ["api", *WORKER_SERVICES]:
        line = rf"service_stopped\s.*outcome=returned\s.*service={re.escape(service)}\b"
        assert re.search(line, text), f"{service} did not stop gracefully:\n{text[-3000:]}"
    assert "service_failed" not in text
    assert "ripple dev stopped" in text
