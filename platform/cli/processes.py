"""Process commands: `ripple dev`, `serve`, `worker` and `migrate`.

Thin on purpose: each parses its options, checks the bind address, and hands over to
`ripple.platform.processes.dev` / `ripple.platform.processes.server` (or the migrator).
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from ripple.platform.cli.groups import app
from ripple.platform.cli.operate import settings as load
from ripple.platform.cli.output import err, fail, out

if TYPE_CHECKING:
    from ripple.platform.core.config import Settings

__all__ = ["dev", "migrate", "serve", "worker"]


def _check_bind(host: str, settings: Settings) -> None:
    if settings.api_tokens:
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise fail(
            f"refusing to bind {host} without auth: set RIPPLE_API_TOKENS (comma-separated) "
            "or bind 127.0.0.1",
            2,
        )


@app.command()
def dev(
    app_path: Annotated[
        str | None, typer.Option("--app", help="Module with your workflows.")
    ] = None,
    host: Annotated[str, typer.Option(help="Interface for the API.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port for the API.")] = 8080,
    data_dir: Annotated[
        Path, typer.Option(help="Where the embedded Postgres and Redis keep their data.")
    ] = Path(".ripple"),
    concurrency: Annotated[int, typer.Option(min=1)] = 100,
) -> None:
    """All in one process: API + worker (+ embedded Postgres/Redis when no RIPPLE_DATABASE_URL)."""
    from ripple.platform.errors import RippleError
    from ripple.platform.processes.dev import run_dev

    _check_bind(host, load())
    try:
        run_dev(app_path, host=host, port=port, data_dir=data_dir, concurrency=concurrency)
    except RippleError as exc:
        raise fail(exc.message) from None


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    app_path: Annotated[
        str | None,
        typer.Option(
            "--app",
            help="Module with your workflows: starts by name validate input before writing.",
        ),
    ] = None,
) -> None:
    """Run the HTTP API (tokens from RIPPLE_API_TOKENS; none = loopback only, no auth)."""
    from ripple.platform.core.logs import configure_logging
    from ripple.platform.errors import RippleError

    settings = load()
    _check_bind(host, settings)
    configure_logging(console=settings.log_console, level=settings.log_level)

    from ripple.platform.client import Client
    from ripple.platform.ops.runner import run_process
    from ripple.platform.processes.server import Services, load_app, run_services

    if not settings.api_tokens:
        err().print("[yellow]auth is off[/yellow]: no RIPPLE_API_TOKENS; serving on loopback only")

    def ready() -> None:
        err().print(f"ripple API listening on http://{host}:{port} (OpenAPI at /openapi.json)")

    try:
        module = load_app(app_path) if app_path else None
        services = Services(api=(host, port), app=module, on_ready=ready)
        run_process(run_services(Client(settings=settings), services))
    except RippleError as exc:
        raise fail(exc.message) from None


@app.command()
def worker(
    app_path: Annotated[str, typer.Option("--app", help="Module with your workflows.")],
    concurrency: Annotated[int, typer.Option(min=1, help="Runs executed at once.")] = 100,
    webhooks: Annotated[
        bool, typer.Option("--webhooks/--no-webhooks", help="Run the webhook dispatcher.")
    ] = True,
    sweeper: Annotated[
        bool, typer.Option("--sweeper/--no-sweeper", help="Run the retention sweeper.")
    ] = True,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="Serve Prometheus /metrics on this port (no auth).", min=0),
    ] = None,
    metrics_host: Annotated[str, typer.Option(help="Interface of --metrics-port.")] = "127.0.0.1",
) -> None:
    """Run workflows of an app module (plus webhook dispatcher and sweeper) until SIGTERM."""
    from ripple.platform.client import Client
    from ripple.platform.core.logs import configure_logging
    from ripple.platform.errors import RippleError
    from ripple.platform.ops.runner import run_process
    from ripple.platform.processes.server import Services, load_app, run_services

    settings = load()
    configure_logging(console=settings.log_console, level=settings.log_level)
    try:
        module = load_app(app_path)
        services = Services(
            app=module,
            worker=True,
            concurrency=concurrency,
            webhooks=webhooks,
            sweeper=sweeper,
            metrics=None if metrics_port is None else (metrics_host, metrics_port),
            on_ready=lambda: err().print(
                f"ripple worker running {', '.join(w.name for w in module.workflows) or 'no'}"
                " workflows; Ctrl-C to stop"
            ),
        )
        run_process(run_services(Client(settings=settings), services))
    except RippleError as exc:
        raise fail(exc.message) from None


@app.command()
def migrate() -> None:
    """Apply pending database migrations (every process also does this when it connects)."""
    import asyncio

    from ripple.platform.core import migrate as migrations
    from ripple.platform.core.db import create_pool
    from ripple.platform.core.logs import configure_logging
    from ripple.platform.errors import RippleError

    settings = load()
    configure_logging(level="warning")

    async def go() -> int:
        pool = await create_pool(settings)
        try:
            return await migrations.migrate_database(settings, pool)
        finally:
            await pool.close()

    try:
        applied = asyncio.run(go())
    except RippleError as exc:
        raise fail(exc.message) from None
    out().print(f"applied {applied} migration(s); the schema is current")
