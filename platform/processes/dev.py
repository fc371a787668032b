"""`ripple dev`: API + worker in one process, on embedded Postgres and Redis when none is set.

Prints what is running and the exact commands to try. Ctrl-C stops the API and the worker, then
the embedded servers, in that order.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

from rich.console import Console

from ripple.platform.client import Client
from ripple.platform.core.config import load_settings
from ripple.platform.core.embedded import EmbeddedServices, start_embedded
from ripple.platform.core.logs import configure_logging
from ripple.platform.ops.runner import run_process
from ripple.platform.processes.server import AppModule, Services, load_app, run_services

__all__ = ["banner", "run_dev"]

_EXAMPLE_SIGNUP = '{"userId": 42, "email": "ann@example.com"}'
_EXAMPLE_VERIFIED = '{"userId": 42}'


def banner(*, url: str, app: AppModule | None, redis: str | None, embedded: Path | None) -> str:
    """What `ripple dev` prints once it is ready."""
    workflows = ", ".join(w.name for w in app.workflows) if app is not None else ""
    where = f"embedded (data under {embedded}/)" if embedded else "from RIPPLE_DATABASE_URL"
    lines = [
        "",
        "[bold green]ripple dev is running[/bold green]",
        f"  API        {url}  (OpenAPI: {url}/openapi.json, docs: {url}/docs)",
        f"  worker     {workflows or 'no workflows (pass --app pkg.module)'}",
        f"  postgres   {where}",
        f"  redis      {'embedded' if embedded and redis else (redis or 'none (polling)')}",
        "",
        "Try it (in another terminal):",
        f"  ripple publish user.signup {shlex.quote(_EXAMPLE_SIGNUP)}",
        f"  curl -s -X POST {url}/v1/topics/user.signup/events "
        f"-H 'content-type: application/json' -d '{{\"payload\": {_EXAMPLE_SIGNUP}}}'",
        "  ripple runs list",
        "  ripple runs show <run id>       # wait until it is `waiting`, then:",
        f"  ripple publish user.verified {shlex.quote(_EXAMPLE_VERIFIED)}",
        "",
        "Ctrl-C stops everything.",
    ]
    return "\n".join(lines)


def run_dev(
    app_path: str | None,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    data_dir: Path = Path(".ripple"),
    concurrency: int = 100,
) -> None:
    """Run `ripple dev` until Ctrl-C (blocks)."""
    console = Console(stderr=True, soft_wrap=True)
    settings = load_settings()
    # Console logs, quiet by default so the banner stays readable (RIPPLE_LOG_LEVEL=debug: all).
    level = "warning" if settings.log_level == "info" else settings.log_level
    configure_logging(console=True, level=level)
    started = time.monotonic()
    embedded: EmbeddedServices | None = None
    try:
        if settings.database_url is None:
            console.print(f"starting embedded Postgres and Redis under {data_dir}/ …")
            embedded = start_embedded(data_dir)
            settings = settings.model_copy(
                update={"database_url": embedded.database_url, "redis_url": embedded.redis_url}
            )
        module = load_app(app_path) if app_path else None
        url = f"http://{host}:{port}"

        def ready() -> None:
            console.print(
                banner(
                    url=url,
                    app=module,
                    redis=settings.redis_url,
                    embedded=data_dir if embedded is not None else None,
                ),
                highlight=False,
            )
            console.print(f"(ready in {time.monotonic() - started:.1f} s)")

        services = Services(
            api=(host, port), app=module, worker=True, concurrency=concurrency, on_ready=ready
        )
        run_process(run_services(Client(settings=settings), services))
    finally:
        if embedded is not None:
            embedded.stop()
        console.print("ripple dev stopped")
        sys.stderr.flush()
