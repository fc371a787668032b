"""The `ripple` command: processes (`dev`, `serve`, `worker`, `migrate`) and operator commands.

Operator commands work on the database by default, calling the `Client` method that the action's
REST route calls (`direct.py`), or on a remote API with `--api URL --token T` (`remote.py`);
`operate.py` picks one. Either way they print the REST API's JSON shapes with `--json`. One
module per command group; `groups.py` holds the Typer apps, `options.py` the shared options,
`output.py` the rendering.

Importing this package loads no command: `app` (the whole command tree) imports every command
module when it is first named, and `main()` imports only the modules of the group it runs
(`ripple runs list` loads `runs.py` and the `runs` commands of `deploys.py`, not the other
groups). Every heavy module (pydantic, asyncpg, httpx, rich, structlog, the workflows engine) is
imported by the command that uses it, and no operator command imports FastAPI, so the CLI
starts fast (bench/cli_startup.py measures it; tests/unit/platform/test_cli_imports.py and
tests/integration/platform/test_cli_in_process.py keep it so).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Sequence
from importlib import import_module
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import typer

    from ripple.platform.cli.groups import app

__all__ = ["COMMAND_MODULES", "GROUP_MODULES", "app", "load_commands", "main"]

#: The command modules; importing one registers its commands, in this order in `--help`.
COMMAND_MODULES: Final = (
    "processes",
    "topics",
    "subscriptions",
    "runs",
    "queues",
    "deliveries",
    "schedules",
    "topic_schemas",
    "audit",
    "deploys",
    "tokens",
)
#: Per command group (`ripple GROUP ...`), the modules that register its commands, in the
#: order of COMMAND_MODULES (tests/unit/platform/test_cli_imports.py checks both).
GROUP_MODULES: Final[dict[str, tuple[str, ...]]] = {
    "runs": ("runs", "deploys"),
    "subscriptions": ("subscriptions",),
    "queues": ("queues",),
    "deliveries": ("deliveries",),
    "schedules": ("schedules",),
    "topics": ("topics", "topic_schemas"),
    "workflows": ("deploys",),
    "tokens": ("tokens",),
}


def load_commands(modules: Sequence[str] = COMMAND_MODULES) -> typer.Typer:
    """The root Typer app with the commands of `modules` (default: all) registered."""
    for name in modules:
        import_module(f"ripple.platform.cli.{name}")
    from ripple.platform.cli.groups import app

    return app


def __getattr__(name: str) -> Any:
    if name == "app":
        return load_commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console entry point."""
    args = sys.argv[1:]
    group = GROUP_MODULES.get(args[0]) if args else None
    if group is not None:
        # A group's commands are one-shot: no cyclic garbage collection during the imports and
        # the action, whose passes over the objects they create would cost more than they free.
        gc.disable()
    root = load_commands(COMMAND_MODULES if group is None else group)
    try:
        root()
    finally:
        # The process ends here. Frozen objects are left out of the interpreter's last garbage
        # collection, which would otherwise walk every object of every imported module (about
        # a fifth of an operator command's CPU); the OS reclaims the memory anyway.
        gc.freeze()
