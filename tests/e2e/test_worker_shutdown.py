"""`ripple worker` on SIGTERM with a sync step that outlives the shutdown grace: the run is
released for other workers and the process exits right after the grace, instead of waiting for
the thread (which would run the step in two processes at once)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from ripple.platform.client import Client
from ripple.platform.core.config import load_settings
from tests.e2e.conftest import REPO_ROOT, Process
from tests.helpers import assert_eventually

GRACE = 2.0
STEP_SECONDS = 60.0


async def test_worker_sigterm__sync_step_past_the_grace_is_released_and_the_process_exits(
    ripple_env: dict[str, str], tmp_path: Path
) -> None:
    env = {**ripple_env, "RIPPLE_SHUTDOWN_GRACE": str(GRACE), "RIPPLE_LOG_LEVEL": "info"}
    marker = tmp_path / "marker"
    worker = Process(
        ["worker", "--app", "tests.e2e.shutdown_app", "--no-webhooks", "--no-sweeper"],
        env,
        REPO_ROOT,
        tmp_path / "worker.log",
    )
    try:
        await asyncio.to_thread(worker.wait_output, "ripple worker running")
        settings = load_settings(database_url=env["RIPPLE_DATABASE_URL"], redis_url=None)
        async with Client(settings=settings) as client:
            handle = await client.start(
                "slow-sync", {"marker": str(marker), "seconds": STEP_SECONDS}
            )
            await assert_eventually(marker.exists, timeout=60)
            signaled = time.monotonic()
            # Far less than the step's 60 s: the process does not wait for the thread.
            code = await asyncio.to_thread(worker.stop, timeout=GRACE + 20)
            took = time.monotonic() - signaled
            assert code == 0, worker.text()[-3000:]
            assert took < STEP_SECONDS / 2, f"exit took {took:.1f} s"
            run = await client.get_run(handle.run_id)
            assert run is not None
            assert run.status == "pending"  # released: the next worker runs the step again
        assert marker.read_text() == "started"  # the thread never got to record anything
        events = [json.loads(line).get("event") for line in _json_lines(worker.text())]
        assert "worker_sync_steps_abandoned" in events
        assert "process_exit_abandoning_threads" in events
    finally:
        worker.stop(timeout=1)


def _json_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("{")]
