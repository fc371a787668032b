"""A worker process for the resilience tests.

`python -m tests.e2e.resilience.worker_main --app <module> --concurrency N` connects a `Client`
from the RIPPLE_* environment, runs a `Worker` for every workflow definition found in the module
(no webhook dispatcher, no sweeper), prints `ready` on stdout once running, and on SIGTERM stops
gracefully (in-flight steps get the configured grace), exiting 0: `Worker.run()` handles the
signal itself. With `--own-signals` the program handles SIGTERM instead (prints `stopping`, then
calls `worker.stop()`) and creates the worker with `handle_signals=False`.
With `--hold` it prints `connected` once connected and waits for a line on stdin before it starts
the worker: a standby a test can start at once, without paying for imports at that moment.
With `--restarts N` it acts as a supervisor: it imports everything once, then forks the worker
and forks a fresh one each time the previous one dies (up to N times), printing `exited <code>`
after each; SIGTERM is forwarded to the current worker and ends the supervision.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal
import sys
from typing import Any

from ripple.platform.client import Client
from ripple.platform.core.config import load_settings
from ripple.platform.core.logs import configure_logging
from ripple.workflows import Worker
from ripple.workflows.authoring.definition import WorkflowDefinition


def definitions(module_name: str) -> list[WorkflowDefinition[Any, Any]]:
    """Every workflow definition a module defines at its top level."""
    module = importlib.import_module(module_name)
    found = [v for v in vars(module).values() if isinstance(v, WorkflowDefinition)]
    if not found:
        raise SystemExit(f"no @workflow definitions in {module_name}")
    return found


async def main(app: str, concurrency: int, hold: bool, own_signals: bool = False) -> None:
    workflows = definitions(app)
    settings = load_settings()
    configure_logging(console=settings.log_console, level=settings.log_level)
    async with Client(settings=settings) as client:
        if hold:  # a standby worker: imported and connected, it starts when told to
            print("connected", flush=True)
            await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        worker = Worker(
            client,
            workflows,
            concurrency=concurrency,
            webhooks=False,
            sweeper=False,
            handle_signals=not own_signals,
        )

        def on_sigterm() -> None:
            print("stopping", flush=True)
            worker.stop()

        if own_signals:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_sigterm)
        task = asyncio.create_task(worker.run())
        await asyncio.sleep(0)  # let the worker start before announcing it
        print("ready", flush=True)
        await task
        print("stopped", flush=True)


def supervise(app: str, concurrency: int, restarts: int) -> int:
    """Fork the worker, and a fresh one whenever it dies, up to `restarts` times."""
    definitions(app)  # import everything once, before forking
    child = 0
    stopping = False

    def forward(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child:
            os.kill(child, signum)

    signal.signal(signal.SIGTERM, forward)
    code = 1
    for _ in range(restarts + 1):
        child = os.fork()
        if child == 0:  # the worker: no supervisor duties, default signal handling
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            exit_code = 1
            try:
                asyncio.run(main(app, concurrency, hold=False))
                exit_code = 0
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(exit_code)
        _, status = os.waitpid(child, 0)
        code = os.waitstatus_to_exitcode(status)
        print(f"exited {code}", flush=True)
        if code == 0 or stopping:
            break
    return code


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--app", required=True, help="module defining the workflows")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--hold", action="store_true", help="connect, then wait for a stdin line")
    parser.add_argument("--restarts", type=int, default=None, help="supervise: restart on death")
    parser.add_argument("--own-signals", action="store_true", help="handle_signals=False")
    args = parser.parse_args()
    if args.restarts is not None:
        sys.exit(supervise(args.app, args.concurrency, args.restarts))
    asyncio.run(main(args.app, args.concurrency, args.hold, args.own_signals))


if __name__ == "__main__":
    cli()
