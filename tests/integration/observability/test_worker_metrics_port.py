"""`ripple worker --metrics-port`: a worker process exposes /metrics with Postgres gauges."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ripple.platform.core.db import Pool
from tests.helpers import assert_eventually

ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
@pytest.mark.timeout(180)  # a process start imports the whole stack: slow on a loaded machine
async def test_worker_metrics_port__serves_gauges_until_sigterm(
    pool: Pool, database_url: str
) -> None:
    await pool.execute(
        "INSERT INTO ripple_queue_messages (queue, body) VALUES ('port-q', '{}'), ('port-q', '{}')"
    )
    port = free_port()
    env = {**os.environ, "RIPPLE_DATABASE_URL": database_url, "RIPPLE_POLL_INTERVAL": "0.2"}
    env.pop("RIPPLE_REDIS_URL", None)
    ripple = str(Path(sys.executable).with_name("ripple"))
    proc = await asyncio.create_subprocess_exec(
        ripple,
        "worker",
        "--app",
        "examples.onboarding",
        "--no-webhooks",
        "--no-sweeper",
        "--metrics-port",
        str(port),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:

        async def scrape() -> str | None:
            try:
                async with httpx.AsyncClient() as http:
                    response = await http.get(f"http://127.0.0.1:{port}/metrics")
            except httpx.TransportError:
                return None
            return response.text if response.status_code == 200 else None

        text = await assert_eventually(scrape, timeout=120, interval=0.1)
        assert text is not None
        families = {f.name: f for f in text_string_to_metric_families(text)}
        depth = {s.labels["queue"]: s.value for s in families["queue_depth"].samples}
        assert depth["port-q"] == 2
        assert "workflow_runs_started" in families
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 30)
    assert code == 0
