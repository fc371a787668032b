"""Fixtures for the API/CLI end-to-end tests: real `ripple` subprocesses on a test database.

Processes are expensive to start, so one `ripple serve` (`api_server`) and one `ripple worker`
(`worker_process`) serve all tests of a module, on a database of that module (cloned from the
migrated template) and a Redis prefix of its own. Tests in a module therefore use distinct
topics, queues and inputs. `ripple_cli` runs one CLI command and returns its output.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx
import pytest

from tests.conftest import DatabaseDropper, _admin
from tests.helpers import with_database

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


@pytest.fixture(scope="module")
def module_database_url(
    pg_admin_url: str, template_db: str, drop_database: DatabaseDropper
) -> Iterator[str]:
    """A migrated database for this test module; dropped afterwards."""
    name = f"e2e_{uuid.uuid4().hex[:16]}"
    asyncio.run(_admin(pg_admin_url, f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"'))
    try:
        yield with_database(pg_admin_url, name)
    finally:
        drop_database.drop(name)


@pytest.fixture(scope="module")
def ripple_env(module_database_url: str, redis_url: str) -> dict[str, str]:
    """Environment of `ripple` processes of this module: its database, Redis and prefix."""
    return ripple_environment(module_database_url, redis_url)


def ripple_environment(database_url: str, redis_url: str, **extra: str) -> dict[str, str]:
    """The `ripple_env` of a module whose database is `database_url`, plus `extra`."""
    return base_env(
        **extra,
        RIPPLE_DATABASE_URL=database_url,
        RIPPLE_REDIS_URL=redis_url,
        RIPPLE_REDIS_PREFIX=f"e2e{uuid.uuid4().hex[:10]}:",
        RIPPLE_POLL_INTERVAL="0.25",
        RIPPLE_POOL_MIN_SIZE="1",
        RIPPLE_POOL_MAX_SIZE="5",
        RIPPLE_SHUTDOWN_GRACE="2",
        RIPPLE_WEBHOOK_ALLOWED_NETWORKS="127.0.0.0/8",
        RIPPLE_LOG_LEVEL="warning",
    )


class Process:
    """A `ripple` subprocess whose stdout+stderr go to a log file (never a full pipe)."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path, log: Path) -> None:
        self.args = args
        self.log = log
        self._file: IO[bytes] = log.open("wb")
        self.proc = subprocess.Popen(
            [RIPPLE, *args],
            env=env,
            cwd=str(cwd),
            stdout=self._file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def check_alive(self) -> None:
        code = self.proc.poll()
        if code is not None:
            raise AssertionError(
                f"ripple {' '.join(self.args)} exited with {code}:\n{self.text()[-3000:]}"
            )

    def wait_output(self, text: str, timeout: float = 90.0) -> None:
        """Wait until `text` was printed (fails early if the process died)."""
        deadline = time.monotonic() + timeout
        while text not in self.text():
            self.check_alive()
            if time.monotonic() > deadline:
                raise AssertionError(f"no {text!r} within {timeout}s:\n{self.text()[-3000:]}")
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Send `sig` and wait for the exit code (SIGKILL after `timeout`)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._file.close()
        return int(self.proc.returncode)


def wait_healthy(url: str, process: Process, timeout: float = 90.0) -> None:
    """Wait until `url`/healthz answers 200 (failing early if the process died)."""
    deadline = time.monotonic() + timeout
    while True:
        process.check_alive()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz", timeout=2.0).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} not healthy within {timeout}s:\n{process.text()[-3000:]}")
        time.sleep(0.1)


@dataclass
class ApiServer:
    """A running `ripple serve`."""

    url: str
    token: str
    process: Process

    def http(self, *, token: str | None = TOKEN) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30.0)


@pytest.fixture(scope="module")
def api_server(
    ripple_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ApiServer]:
    """`ripple serve --app examples.onboarding` on a free port with bearer token TOKEN."""
    port = free_port()
    env = {**ripple_env, "RIPPLE_API_TOKENS": f"other-token,{TOKEN}"}
    args = ["serve", "--host", "127.0.0.1", "--port", str(port), "--app", "examples.onboarding"]
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    process = Process(args, env, REPO_ROOT, log)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield ApiServer(url, TOKEN, process)
    finally:
        code = process.stop()
        assert code == 0, f"ripple serve exited with {code}:\n{process.text()[-3000:]}"


@pytest.fixture(scope="module")
def worker_process(
    ripple_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Process]:
    """`ripple worker --app examples.onboarding` against this module's database."""
    log = tmp_path_factory.mktemp("worker") / "worker.log"
    process = Process(["worker", "--app", "examples.onboarding"], ripple_env, REPO_ROOT, log)
    try:
        process.wait_output("ripple worker running")
        yield process
    finally:
        code = process.stop()
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
