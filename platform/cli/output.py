"""What the CLI prints: rich consoles (imported on first use), tables, JSON and short formats."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "clock",
    "duration",
    "emit",
    "err",
    "error_text",
    "fail",
    "out",
    "print_json",
    "short_time",
    "table",
    "target_text",
]


@functools.cache
def out() -> Console:
    """Standard output. Piped output (not a terminal) gets a wide console, so tables never wrap
    ids in files or tests."""
    from rich.console import Console

    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)


@functools.cache
def err() -> Console:
    """Standard error (messages about the command rather than its result)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print `error: message` on stderr; raise the returned exit (code 2: usage, 1: failure)."""
    err().print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


def print_json(value: Any) -> None:
    out().print_json(json.dumps(value, default=str))


def emit(as_json: bool, result: Any, text: Callable[[Any], str]) -> None:
    """Print `result` as JSON with `--json`, else the line `text(result)`."""
    if as_json:
        print_json(result)
    else:
        out().print(text(result))


def table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.table import Table

    grid = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        # Ids and keys are copied into the next command: never wrap or truncate them.
        grid.add_column(column, no_wrap=i == 0, overflow="fold")
    for row in rows:
        grid.add_row(*["" if v is None else str(v) for v in row])
    out().print(grid)


def short_time(value: str | None) -> str:
    return "" if not value else value.replace("T", " ")[:23]


def duration(ms: float | None) -> str:
    if ms is None:
        return ""
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def clock(value: str | None) -> str:
    """`2026-11-22T05:57:48.132122Z` -> `05:57:48.132`."""
    return "" if not value else value.split("T")[-1][:12]


def error_text(error: Any) -> str:
    if not error:
        return ""
    if isinstance(error, dict):
        return f"{error.get('type', 'Error')}: {error.get('message', '')}"
    return str(error)


def target_text(target: dict[str, Any]) -> str:
    kind = target.get("type")
    where = target.get({"queue": "queue", "workflow": "workflow"}.get(str(kind), "url"))
    return f"{kind} {where}"
