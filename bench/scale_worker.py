"""A bench worker that times its claims: `python -m bench.scale_worker CONCURRENCY`.

Prints `ready`, runs until SIGTERM, then prints one JSON line: the duration of every claim
statement it ran (`store.claim_runs`, wrapped here; the worker calls it through the module).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from bench.app import WORKFLOWS
from ripple.platform.client import Client
from ripple.platform.core.logs import configure_logging
from ripple.platform.ops.runner import ProcessRunner, run_process
from ripple.workflows import Worker, store

CLAIMS: list[float] = []
_claim_runs = store.claim_runs


async def _timed_claim_runs(*args: Any, **kwargs: Any) -> Any:
    started = time.perf_counter()
    try:
        return await _claim_runs(*args, **kwargs)
    finally:
        CLAIMS.append(time.perf_counter() - started)


async def main(concurrency: int) -> None:
    configure_logging(level="warning")
    store.claim_runs = _timed_claim_runs  # type: ignore[assignment]
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
    print(json.dumps({"claims": CLAIMS}), flush=True)


if __name__ == "__main__":
    run_process(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
