"""Fixtures for the API/CLI end-to-end tests: real `ripple` subprocesses on the test database.

`api_server` runs `ripple serve` on a free port with a bearer token; `worker_process` runs
`ripple worker --app examples.onboarding`; `ripple_cli` runs one CLI command and returns its
output. Every process gets this test's database, Redis and Redis prefix via the environment.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.helpers import assert_eventually

REPO_ROOT = Path(__file__).resolve().parents[2]
RIPPLE = str(Path(sys.executable).parent / "ripple")
TOKEN = "e2e-token-0123456789"


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env(**extra: str) -> dict[str, str]:
    """The environment without any RIPPLE_* setting from the caller, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIPPLE_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra)
    return env


@pytest.fixture
def ripple_env(database_url: str, redis_url: str, redis_prefix: str) -> dict[str, str]:
    """Environment of `ripple` processes for this test: its database, Redis and prefix."""
    return base_env(
        RIPPLE_DATABASE_URL=database_url,
        RIPPLE_REDIS_URL=redis_url,
        RIPPLE_REDIS_PREFIX=redis_prefix,
        RIPPLE_POLL_INTERVAL="0.25",
        RIPPLE_POOL_MIN_SIZE="1",
        RIPPLE_POOL_MAX_SIZE="5",
        RIPPLE_SHUTDOWN_GRACE="2",
        RIPPLE_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
        RIPPLE_LOG_LEVEL="warning",
    )


@dataclass
class Process:
    """A running `ripple` subprocess whose output is collected in the background."""

    proc: asyncio.subprocess.Process
    output: list[str] = field(default_factory=list)
    _drain: asyncio.Task[None] | None = None

    def start_draining(self) -> None:
        async def drain() -> None:
            assert self.proc.stdout is not None
            while line := await self.proc.stdout.readline():
                self.output.append(line.decode(errors="replace").rstrip("\n"))

        self._drain = asyncio.create_task(drain())

    def text(self) -> str:
        return "\n".join(self.output)

    async def wait_output(self, text: str, timeout: float = 60.0) -> None:
        """Wait until a line containing `text` was printed (fails early if the process died)."""

        def printed() -> bool:
            if any(text in line for line in self.output):
                return True
            self.check_alive()
            return False

        await assert_eventually(printed, timeout=timeout, interval=0.05)

    def check_alive(self) -> None:
        if self.proc.returncode is not None:
            raise AssertionError(
                f"process exited with {self.proc.returncode}; output:\n{self.text()[-3000:]}"
            )

    async def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send `sig` and wait for the exit code (SIGKILL after `timeout`)."""
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._drain is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._drain, 5)
        assert self.proc.returncode is not None
        return self.proc.returncode


async def start_process(args: list[str], env: dict[str, str], cwd: Path = REPO_ROOT) -> Process:
    """Start `ripple <args>` with stdout and stderr merged and collected."""
    proc = await asyncio.create_subprocess_exec(
        RIPPLE,
        *args,
        env=env,
        cwd=str(cwd),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    process = Process(proc)
    process.start_draining()
    return process


@dataclass
class ApiServer:
    """A running `ripple serve`."""

    url: str
    token: str
    process: Process

    def http(self, *, token: str | None = TOKEN) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30.0)


async def wait_healthy(url: str, process: Process, timeout: float = 60.0) -> None:
    """Wait until `url`/healthz answers 200 (failing early if the process died)."""

    async def healthy() -> bool:
        process.check_alive()
        try:
            async with httpx.AsyncClient(timeout=2.0) as http:
                return (await http.get(f"{url}/healthz")).status_code == 200
        except httpx.HTTPError:
            return False

    await assert_eventually(healthy, timeout=timeout, interval=0.1)


@pytest.fixture
async def api_server(ripple_env: dict[str, str]) -> AsyncIterator[ApiServer]:
    """`ripple serve` on a free port with bearer token TOKEN, against this test's database."""
    port = free_port()
    env = {**ripple_env, "RIPPLE_API_TOKENS": f"other-token,{TOKEN}"}
    args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--app", "examples.onboarding"]
    process = await start_process(args, env)
    url = f"http://127.0.0.1:{port}"
    try:
        await wait_healthy(url, process)
        yield ApiServer(url, TOKEN, process)
    finally:
        code = await process.stop()
        assert code == 0, f"ripple serve exited with {code}:\n{process.text()[-3000:]}"


@pytest.fixture
async def worker_process(ripple_env: dict[str, str]) -> AsyncIterator[Process]:
    """`ripple worker --app examples.onboarding` against this test's database."""
    process = await start_process(["worker", "--app", "examples.onboarding"], ripple_env)
    try:
        await process.wait_output("ripple worker running")
        yield process
    finally:
        code = await process.stop()
        assert code == 0, f"ripple worker exited with {code}:\n{process.text()[-3000:]}"


@dataclass
class Done:
    """A finished `ripple` command."""

    returncode: int
    stdout: str
    stderr: str


CliRunner = Callable[..., Awaitable[Done]]


@pytest.fixture
def ripple_cli(ripple_env: dict[str, str]) -> CliRunner:
    """Run one `ripple` command to completion and return its output (raises on failure)."""

    async def run(
        *args: str,
        check: bool = True,
        stdin: str | None = None,
        env: dict[str, str] | None = None,
        cwd: Path = REPO_ROOT,
    ) -> Done:
        proc = await asyncio.create_subprocess_exec(
            RIPPLE,
            *args,
            env=env or ripple_env,
            cwd=str(cwd),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(
            proc.communicate(stdin.encode() if stdin is not None else None), 60
        )
        done = Done(proc.returncode or 0, out.decode(), err.decode())
        if check and done.returncode != 0:
            raise AssertionError(
                f"ripple {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
            )
        return done

    return run
