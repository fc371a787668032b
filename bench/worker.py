"""Benchmark worker process: `python -m bench.worker CONCURRENCY`; prints `ready`; SIGTERM stops
it (its `ProcessRunner` handles it)."""

from __future__ import annotations

import sys

from bench.app import WORKFLOWS
from ripple.platform.client import Client
from ripple.platform.core.logs import configure_logging
from ripple.platform.ops.runner import ProcessRunner, run_process
from ripple.workflows import Worker


async def main(concurrency: int) -> None:
    configure_logging(level="warning")
    async with Client() as client:
        worker = Worker(client, WORKFLOWS, concurrency=concurrency, webhooks=False, sweeper=False)
        # As `ripple worker` does: one runner (SIGTERM stops it), the GC frozen once started.
        runner = ProcessRunner(
            worker.services(),
            name="worker",
            freeze=True,
            on_started=lambda: print("ready", flush=True),
        )
        await runner.run()


if __name__ == "__main__":
    # As `ripple worker` does: the process's event loop through run_process (uvloop).
    run_process(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
