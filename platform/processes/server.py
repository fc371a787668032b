"""Running Ripple processes: the API server, a worker for an app module, or both at once.

Owns process concerns only: loading the user's app module (its `WorkflowDefinition`s and optional
`async def setup(client)`), uvicorn without its own signal handling, and a graceful stop on
SIGINT/SIGTERM (stop accepting, let the worker finish or release in-flight work, then return),
composed by one `ProcessRunner` (platform/ops/runner.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import os
import socket
import sys
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import uvicorn

from ripple.platform.api.app import create_app
from ripple.platform.api.http_protocol import BoundedHttpToolsProtocol
from ripple.platform.client import Client
from ripple.platform.core.logs import get_logger
from ripple.platform.errors import ConfigError
from ripple.platform.ops.observability import serve_metrics
from ripple.platform.ops.runner import ProcessRunner
from ripple.platform.ops.services import BackgroundService
from ripple.workflows.authoring.definition import WorkflowDefinition
from ripple.workflows.runtime.bodies import sync_bodies_running

__all__ = ["AppModule", "Services", "load_app", "run_services"]

log = get_logger("ripple.process")


@dataclass
class AppModule:
    """A user's app module: its workflows and its optional `setup(client)`."""

    module: ModuleType
    workflows: list[WorkflowDefinition[Any, Any]]
    setup: Callable[[Client], Awaitable[Any]] | None


def load_app(path: str) -> AppModule:
    """Import `pkg.module` (the current directory is importable) and find its workflows."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(path)
    except ImportError as exc:
        raise ConfigError(
            f"cannot import app module {path!r}: {exc}; run from the directory that contains it "
            "or add it to PYTHONPATH"
        ) from exc
    workflows: list[WorkflowDefinition[Any, Any]] = []
    seen: set[int] = set()
    for value in vars(module).values():
        if isinstance(value, WorkflowDefinition) and id(value) not in seen:
            seen.add(id(value))
            workflows.append(value)
    setup = getattr(module, "setup", None)
    if setup is not None and not inspect.iscoroutinefunction(setup):
        raise ConfigError(f"{path}.setup must be `async def setup(client)`")
    return AppModule(module, workflows, setup)


class _Server(uvicorn.Server):
    """uvicorn without its signal capture: the process runner owns SIGINT/SIGTERM."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass
class Services:
    """What `run_services` runs in this process."""

    api: tuple[str, int] | None = None
    app: AppModule | None = None
    worker: bool = False
    concurrency: int = 100
    webhooks: bool = True
    sweeper: bool = True
    #: Serve Prometheus `/metrics` on this (host, port) beside the worker (no auth).
    metrics: tuple[str, int] | None = None
    on_ready: Callable[[], None] | None = None


async def _start_metrics(client: Client, where: tuple[str, int] | None) -> asyncio.Server | None:
    """The worker's own `/metrics` endpoint, when asked for."""
    if where is None:
        return None
    host, port = where
    return await serve_metrics(port, host=host, collector=client.gauges)


async def _stop_metrics(server: asyncio.Server | None) -> None:
    if server is not None:
        server.close()
        await server.wait_closed()


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, or a `ConfigError` that says what to change."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio turns Nagle off (TCP_NODELAY) only on accepted sockets
    # whose `proto` says TCP, and an accepted socket inherits `proto` from this one (0 when
    # left out). With Nagle on, a response written in two parts (head, then body) waits for
    # the client's delayed ACK, a stall long enough to cap the API's request rate.
    # Linux also copies TCP_NODELAY from the listening socket to the accepted ones.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror}); pick another --port or --host"
        ) from None
    sock.set_inheritable(True)
    return sock


async def run_services(client: Client, services: Services) -> None:
    """Run the API and/or a worker until SIGINT/SIGTERM, then stop them gracefully.

    One `ProcessRunner` runs the API server and the worker's services (its executor, the
    webhook dispatcher, the sweeper, the scheduler) side by side: a signal, or any of them
    failing, stops them all. Once all are started it freezes the startup objects for the GC.
    """
    from ripple.workflows.runtime.worker import Worker

    # Bind first: a port in use is a clear error before anything else starts.
    sock = _listen(*services.api) if services.api is not None else None
    try:
        await client.connect()
    except BaseException:
        if sock is not None:
            sock.close()
        raise
    metrics_server: asyncio.Server | None = None
    worker: Worker | None = None
    try:
        if services.app is not None:
            # Known definitions let `start` by name validate input before anything is written.
            client.workflows.register(*services.app.workflows)
            if services.app.setup is not None:
                await services.app.setup(client)
        parts: list[BackgroundService] = []
        if sock is not None:
            parts.append(_ApiService(_api_server(client, sock), sock))
        if services.worker:
            workflows = services.app.workflows if services.app is not None else []
            worker = Worker(
                client,
                workflows,
                concurrency=services.concurrency,
                webhooks=services.webhooks,
                sweeper=services.sweeper,
                handle_signals=False,  # this process's runner handles them for every service
            )
            parts += worker.services()
        metrics_server = await _start_metrics(client, services.metrics)
        runner = ProcessRunner(parts, freeze=True, on_started=services.on_ready)
        await runner.run()
    finally:
        if sock is not None:
            sock.close()
        await _stop_metrics(metrics_server)
        await client.close()
    if worker is not None and sync_bodies_running():
        _exit_abandoning_threads()


class _ApiService:
    """The uvicorn server as a service of the process runner."""

    name = "api"

    def __init__(self, server: _Server, sock: socket.socket) -> None:
        self._server = server
        self._sock = sock

    async def run(self) -> None:
        await self._server.serve(sockets=[self._sock])

    def stop(self) -> None:
        self._server.should_exit = True

    async def started(self) -> None:
        # uvicorn exposes no event for "listening"; poll its flag briefly.
        while not self._server.started:  # noqa: ASYNC110
            await asyncio.sleep(0.02)


def _exit_abandoning_threads() -> None:
    """End the process now although sync step bodies still run in threads: their runs were
    released when the shutdown grace ran out, and another worker may be running those steps
    already. Waiting for the threads (as interpreter shutdown would) would run one step in two
    processes at once, for as long as the slower one takes."""
    log.warning("process_exit_abandoning_threads", threads=sync_bodies_running())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _api_server(client: Client, sock: socket.socket) -> _Server:
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(
        create_app(client),
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
        # httptools, bounded: uvicorn's own httptools protocol answers a plain 400 to request
        # targets over 64 KiB (the API promises a 414 problem) and bounds no request head;
        # this subclass answers 414/431 and reads heads up to MAX_REQUEST_HEAD_BYTES. It
        # costs less CPU per request than h11 (`python -m bench.rest_variants`).
        http=BoundedHttpToolsProtocol,
    )
    return _Server(config)
