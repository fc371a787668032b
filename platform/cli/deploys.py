"""Deploy commands: `ripple verify`, `ripple runs export` and `ripple workflows versions`.

All three only read, on `RIPPLE_DATABASE_READ_URL` when set, else `RIPPLE_DATABASE_URL` (a
replica or a read-only role works); unlike other commands they apply no pending migration.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from ripple.platform.cli.groups import app, runs_app
from ripple.platform.cli.operate import settings
from ripple.platform.cli.options import duration_arg
from ripple.platform.cli.output import err, fail, out, print_json, table

if TYPE_CHECKING:
    from ripple.workflows.runs.deploys import Deploys

__all__ = ["runs_export", "verify", "workflows_versions"]

T = TypeVar("T")

workflows_app = typer.Typer(
    help="Workflow versions in use.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(workflows_app, name="workflows")


def _run(action: Callable[[Deploys], Awaitable[T]]) -> T:
    """Run `action` on a pool of one connection to the read URL (else the database URL), with
    no migration on connect: these commands never write, even for a newer build's schema."""
    import asyncio

    from ripple.platform.client import Client
    from ripple.platform.core.db import create_pool
    from ripple.platform.core.logs import configure_logging
    from ripple.platform.core.wake import NullWaker
    from ripple.platform.errors import RippleError
    from ripple.workflows.runs.deploys import Deploys

    configure_logging(level="warning")
    resolved = Client.for_command(settings=settings(), writes=False).settings

    async def go() -> T:
        pool = await create_pool(resolved, dsn=resolved.database_read_url, min_size=1, max_size=1)
        try:
            return await action(Deploys(pool, pool, NullWaker()))
        finally:
            await pool.close()

    try:
        return asyncio.run(go())
    except RippleError as exc:
        raise fail(exc.message) from None


@app.command("verify")
def verify(
    app_path: Annotated[str, typer.Option("--app", help="Module with the new workflow code.")],
    since: Annotated[
        str, typer.Option("--since", help="Also completed/failed runs that ended this recently.")
    ] = "7d",
    limit: Annotated[int, typer.Option("--limit", min=1, help="Runs per workflow version.")] = 1000,
    workflow: Annotated[
        list[str] | None, typer.Option("--workflow", help="Only this workflow (repeatable).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Replay recorded runs against the code in --app, reading only: exit 1 when an active
    run would fail on it (completed-run divergences are warnings)."""
    from ripple.platform.errors import RippleError
    from ripple.platform.processes.server import load_app
    from ripple.workflows.runtime.verify import verify_runs

    window = duration_arg(since, "--since")
    try:
        definitions = load_app(app_path).workflows
    except RippleError as exc:
        raise fail(exc.message, 2) from None
    if workflow:
        unknown = set(workflow) - {d.name for d in definitions}
        if unknown:
            raise fail(f"{app_path} defines no workflow {', '.join(sorted(unknown))}", 2)
        definitions = [d for d in definitions if d.name in workflow]

    async def action(deploys: Deploys) -> Any:
        runs = await deploys.recorded_runs(definitions, since=window, limit=limit)
        if as_json or not sys.stderr.isatty():
            return await verify_runs(runs, definitions)
        from rich.progress import Progress

        with Progress(console=err(), transient=True) as bar:
            task = bar.add_task("verifying", total=len(runs))
            return await verify_runs(
                runs, definitions, progress=lambda n: bar.update(task, completed=n)
            )

    report = _run(action)
    if as_json:
        print_json(report.to_json())
    else:
        for d in report.divergences:
            label = "[red]diverges[/red]" if d.active else "[yellow]warning[/yellow]"
            out().print(
                f"{label} run {d.run_id} ({d.workflow} v{d.version}, {d.status}) position "
                f"{d.position}: journal has {d.expected}, code asks for {d.actual}",
                highlight=False,
            )
        active = sum(d.active for d in report.divergences)
        out().print(
            f"{report.runs_checked} run(s) checked: {active} active run(s) diverge, "
            f"{len(report.divergences) - active} warning(s)",
            highlight=False,
        )
    if not report.ok:
        raise typer.Exit(1)


@runs_app.command("export")
def runs_export(
    run_ids: Annotated[list[str] | None, typer.Argument(help="Run ids to export.")] = None,
    workflow: Annotated[
        str | None, typer.Option("--workflow", help="Export runs of this workflow instead.")
    ] = None,
    since: Annotated[
        str, typer.Option("--since", help="With --workflow: runs created this recently.")
    ] = "1d",
    limit: Annotated[int, typer.Option("--limit", min=1)] = 1000,
) -> None:
    """Write runs and their journals as JSON (format "ripple.runs", version 1) to stdout, for
    `ripple.testing.replay`."""
    from ripple.workflows.runs.verification import dump_runs

    if not run_ids and workflow is None:
        raise fail("name run ids, or a workflow with --workflow", 2)
    window = duration_arg(since, "--since")
    runs = _run(
        lambda deploys: deploys.export(run_ids or (), workflow=workflow, since=window, limit=limit)
    )
    sys.stdout.write(dump_runs(runs) + "\n")


@workflows_app.command("versions")
def workflows_versions(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Per workflow: versions with active runs, the live workers serving each, and whether an
    active version has no live worker (stranded)."""
    from ripple.platform.ops.observability import LIVE_LEASES

    config = settings()
    live = config.lease_seconds * LIVE_LEASES
    result = _run(lambda deploys: deploys.versions(live_seconds=live))
    if as_json:
        print_json([w.to_json() for w in result])
        return
    rows = []
    for w in result:
        for v in w.versions:
            statuses = ", ".join(f"{s} {n}" for s, n in sorted(v.by_status.items()))
            rows.append(
                [
                    w.workflow,
                    "unpinned" if v.version is None else v.version,
                    v.runs,
                    statuses,
                    "" if v.oldest is None else v.oldest.isoformat(timespec="seconds"),
                    v.workers,
                    "STRANDED" if v.stranded else "",
                ]
            )
    table(
        "Workflow versions",
        ["workflow", "version", "active runs", "by status", "oldest", "workers", ""],
        rows,
    )
    if any(w.stranded for w in result):
        err().print("[red]some active versions have no live worker[/red]", highlight=False)
