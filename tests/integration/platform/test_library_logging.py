"""The client is a library: it prints nothing unless the application configures logging, and
a Redis outage is a bounded number of log lines, not one per failed hint."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import structlog

from ripple.platform.core.config import Settings
from ripple.platform.core.wake import QueueReady, RedisWaker
from tests.helpers import assert_eventually
from tests.servers import RedisProcess, free_port

# Publishes three events through a client whose Redis is a dead port (every hint publish
# fails), each time waiting until the hint was handled, so the failure path runs each time.
_QUIET_CLIENT = """
import asyncio, logging, sys
from ripple.platform.client import Client
from ripple.subscribers import QueueTarget

async def main() -> None:
    async with Client(database_url=sys.argv[1], redis_url=sys.argv[2]) as client:
        await client.subscribe("quiet.#", QueueTarget("quiet"))
        for n in range(3):
            await client.publish("quiet.check", {"n": n})
            while client.waker._unsent:
                await asyncio.sleep(0.01)

if len(sys.argv) > 3:
    logging.basicConfig(level=sys.argv[3])
asyncio.run(main())
"""


def _run_client(settings: Settings, *logging_level: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIPPLE_")}
    dead_redis = f"redis://127.0.0.1:{free_port()}/0"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _QUIET_CLIENT,
            str(settings.database_url),
            dead_redis,
            *logging_level,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_client_without_logging_configured__prints_nothing(settings: Settings) -> None:
    done = _run_client(settings)
    assert done.stdout == ""
    assert done.stderr == ""


def test_client_with_stdlib_logging__warns_once_about_failed_hints(settings: Settings) -> None:
    """An application that configures only stdlib logging gets Ripple's lines there."""
    done = _run_client(settings, "INFO")
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    failed = [line for line in lines if "wake_publish_failed" in line]
    assert len(failed) == 1, done.stderr
    assert failed[0].startswith("WARNING:ripple.wake:wake_publish_failed error=")
    assert any(line.startswith("INFO:ripple.subscriptions:subscription_created ") for line in lines)


async def _handled(waker: RedisWaker) -> None:
    """Send one hint and wait until the publisher sent or dropped it."""
    waker.notify(QueueReady(queue="outage"))
    await assert_eventually(lambda: waker._unsent == 0)


async def test_redis_outage__one_warning_and_one_recovery_line(
    redis_process: RedisProcess,
) -> None:
    waker = RedisWaker(redis_process.url, prefix="quiet:", poll_interval=0.2)
    await waker.start()
    try:
        await asyncio.wait_for(waker.connected.wait(), 5)
        await _handled(waker)  # the publisher's connection is up
        with structlog.testing.capture_logs() as entries:
            redis_process.kill()
            for _ in range(10):
                await _handled(waker)
            redis_process.start()

            async def recovered() -> bool:
                await _handled(waker)
                return any(e["event"] == "wake_publish_recovered" for e in entries)

            await assert_eventually(recovered, timeout=20)
    finally:
        await waker.close()
    lines = [e for e in entries if e["log_level"] != "debug"]
    assert sorted(e["event"] for e in lines) == [
        "wake_publish_failed",
        "wake_publish_recovered",
        "wake_redis_lost",
    ]
    (end,) = (e for e in lines if e["event"] == "wake_publish_recovered")
    assert end["log_level"] == "info"
    assert end["failures"] >= 10
