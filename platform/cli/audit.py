"""The `ripple audit` command: the audit trail, newest first."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ripple.platform.cli.groups import app
from ripple.platform.cli.operate import operate
from ripple.platform.cli.options import Remote, operator_command, since_arg
from ripple.platform.cli.output import print_json, short_time, table

__all__ = ["audit"]


@operator_command(app.command("audit"))
def audit(
    remote: Remote,
    since: Annotated[
        str | None, typer.Option(help="Entries since: a duration (7d, 12h) or ISO-8601 time.")
    ] = None,
    action: Annotated[str | None, typer.Option(help="Only this action, e.g. run.cancel.")] = None,
    limit: Annotated[int, typer.Option(min=1)] = 100,
    cursor: Annotated[str | None, typer.Option(help="The next cursor of a previous page.")] = None,
) -> None:
    """List audited operator and admin actions, newest first."""
    when = since_arg(since, "--since")
    page = operate(remote, lambda op: op.audit(when, action, limit, cursor), writes=False)
    if remote.as_json:
        print_json(page)
        return
    rows = [
        [
            short_time(e.get("at")),
            e.get("actor"),
            e.get("action"),
            e.get("target"),
            json.dumps(e.get("details") or {}, separators=(",", ":")),
        ]
        for e in page["items"]
    ]
    table("audit", ["at", "actor", "action", "target", "details"], rows)
    if page.get("nextCursor"):
        typer.echo(f"more: --cursor {page['nextCursor']}")
