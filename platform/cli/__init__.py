"""The `ripple` command: processes (`dev`, `serve`, `worker`, `migrate`) and operator commands.

Operator commands work on the database by default, calling the `Client` method that the action's
REST route calls (`direct.py`), or on a remote API with `--api URL --token T` (`remote.py`);
`operate.py` picks one. Either way they print the REST API's JSON shapes with `--json`. One
module per command group; `app.py` holds the Typer apps, `options.py` the shared options,
`output.py` the rendering.

Only what `ripple --help` needs is imported here: every heavy module (pydantic, asyncpg, httpx,
rich, structlog, the workflows engine) is imported by the command that uses it, and no operator
command imports FastAPI, so the CLI starts fast (bench/cli_startup.py measures it;
tests/unit/platform/test_cli_imports.py and tests/integration/platform/test_cli_in_process.py
keep it so).
"""

from __future__ import annotations

import gc

from ripple.platform.cli.app import app

# Importing a group module registers its commands; the order here is the order of `--help`.
# isort: off
from ripple.platform.cli import processes, topics, subscriptions, runs  # noqa: F401
from ripple.platform.cli import queues, deliveries, schedules, topic_schemas  # noqa: F401
from ripple.platform.cli import audit  # noqa: F401
from ripple.platform.cli import deploys  # noqa: F401
from ripple.platform.cli import tokens  # noqa: F401

# isort: on

__all__ = ["app", "main"]


def main() -> None:
    """Console entry point."""
    try:
        app()
    finally:
        # The process ends here. Frozen objects are left out of the interpreter's last garbage
        # collection, which would otherwise walk every object of every imported module (about
        # a fifth of an operator command's CPU); the OS reclaims the memory anyway.
        gc.freeze()
