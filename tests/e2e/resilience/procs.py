"""Worker subprocesses for the resilience tests: start, signal, watch their output, reap.

Each worker's stdout (`ready`, `stopping`, `stopped`) and stderr (JSON log lines) are drained
continuously into memory, so a busy worker never blocks on a full pipe and a test can wait for a
line or inspect the logs after the fact.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from tests.helpers import assert_eventually

REPO_ROOT = Path(__file__).resolve().parents[3]
APP = "tests.e2e.resilience.app"


class WorkerProcess:
    """One `worker_main` subprocess and everything it has printed so far."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        assert proc.stdout is not None
        assert proc.stderr is not None
        self._drains = [
            asyncio.create_task(self._drain(proc.stdout, self.stdout)),
            asyncio.create_task(self._drain(proc.stderr, self.stderr)),
        ]

    @property
    def pid(self) -> int:
        return self.proc.pid

    @staticmethod
    async def _drain(stream: asyncio.StreamReader, into: list[str]) -> None:
        while line := await stream.readline():
            into.append(line.decode(errors="replace").rstrip("\n"))

    async def wait_stdout(self, text: str, timeout: float = 30.0) -> None:
        """Wait until the worker printed a stdout line equal to `text`."""

        def printed() -> bool:
            if text in self.stdout:
                return True
            if self.proc.returncode is not None:
                raise AssertionError(
                    f"worker {self.pid} exited ({self.proc.returncode}) before printing "
                    f"{text!r}; stderr tail: {self.stderr[-15:]}"
                )
            return False

        await assert_eventually(printed, timeout=timeout)

    async def wait_log(self, event: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the worker logged `event`; returns that log line."""

        def logged() -> dict[str, Any] | None:
            found = [line for line in self.logs() if line.get("event") == event]
            if found:
                return found[0]
            if self.proc.returncode is not None:
                raise AssertionError(f"worker {self.pid} exited before logging {event!r}")
            return None

        found = await assert_eventually(logged, timeout=timeout)
        assert found is not None
        return found

    def logs(self) -> list[dict[str, Any]]:
        """The worker's structured log lines (non-JSON stderr lines are skipped)."""
        parsed = []
        for line in self.stderr:
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                parsed.append(value)
        return parsed

    async def release(self) -> None:
        """Start a worker spawned with `hold=True` and wait until it is running."""
        await self.release_nowait()
        await self.wait_stdout("ready")

    async def release_nowait(self) -> None:
        """Tell a worker spawned with `hold=True` to start (it may be connecting still)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"go\n")
        await self.proc.stdin.drain()

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    async def wait_exit(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit and return its exit code."""
        code = await asyncio.wait_for(self.proc.wait(), timeout)
        await asyncio.gather(*self._drains, return_exceptions=True)
        return code

    async def reap(self) -> None:
        """Make sure the process and any it forked are gone (continue if stopped, SIGKILL)."""
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.killpg(self.proc.pid, sig)  # its own session: the group is it and its children
            except ProcessLookupError:
                break
        await self.proc.wait()
        for task in self._drains:
            task.cancel()
        await asyncio.gather(*self._drains, return_exceptions=True)


class Workers:
    """Starts worker processes against one test database; reaps them all at the end."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.started: list[WorkerProcess] = []

    async def start(
        self,
        *,
        concurrency: int = 10,
        wait_ready: bool = True,
        hold: bool = False,
        restarts: int | None = None,
        own_signals: bool = False,
        app: str = APP,
        **overrides: str,
    ) -> WorkerProcess:
        """Start a worker (env overrides as RIPPLE_* names) and wait for `ready`.

        With `hold`, the worker connects and then waits for `release()` before it claims
        anything: a standby that starts at once, without paying for imports at that moment.
        With `restarts`, the process is a supervisor forking a fresh worker each time the
        previous one dies (stdout gets `exited <code>` after each).
        """
        env = {k: v for k, v in os.environ.items() if not k.startswith("RIPPLE_")}
        env.update(self.env)
        env.update(overrides)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tests.e2e.resilience.worker_main",
            "--app",
            app,
            "--concurrency",
            str(concurrency),
            *(["--hold"] if hold else []),
            *(["--restarts", str(restarts)] if restarts is not None else []),
            *(["--own-signals"] if own_signals else []),
            cwd=REPO_ROOT,
            env=env,
            stdin=asyncio.subprocess.PIPE if hold else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        worker = WorkerProcess(proc)
        self.started.append(worker)
        if wait_ready:
            await worker.wait_stdout("connected" if hold else "ready")
        return worker

    async def reap_all(self) -> None:
        await asyncio.gather(*(worker.reap() for worker in self.started))


@asynccontextmanager
async def worker_processes(env: dict[str, str]) -> AsyncIterator[Workers]:
    workers = Workers(env)
    try:
        yield workers
    finally:
        await workers.reap_all()
