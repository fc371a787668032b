"""Run commands: the `ripple runs` group and `ripple start`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ripple.platform.cli.groups import app, runs_app
from ripple.platform.cli.operate import operate
from ripple.platform.cli.options import (
    BeforeOpt,
    PayloadArg,
    Remote,
    RetrySafeKeyOpt,
    RunIdArg,
    SinceOpt,
    UntilOpt,
    WaitOpt,
    WorkflowOpt,
    YesOpt,
    json_arg,
    operator_command,
    time_arg,
)
from ripple.platform.cli.output import (
    clock,
    duration,
    emit,
    error_text,
    fail,
    out,
    print_json,
    short_time,
    table,
)

if TYPE_CHECKING:
    from ripple.platform.cli.operate import Operator

__all__ = [
    "runs_cancel",
    "runs_cancel_many",
    "runs_fork",
    "runs_list",
    "runs_retry",
    "runs_retry_many",
    "runs_show",
    "runs_signal",
    "runs_start",
    "start",
]

WorkflowArg = Annotated[str, typer.Argument(help="Workflow name.")]
InputArg = Annotated[str | None, typer.Argument(help="JSON input.")]
KeyOpt = Annotated[str | None, typer.Option("--idempotency-key", "-k")]


@operator_command(runs_app.command("start"))
def runs_start(
    remote: Remote,
    workflow: WorkflowArg,
    input: InputArg = None,
    idempotency_key: KeyOpt = None,
    priority: Annotated[
        int, typer.Option(min=0, help="Higher is claimed first among pending runs (0-1000).")
    ] = 0,
    wait: WaitOpt = None,
) -> None:
    """Start a run of WORKFLOW with a JSON input."""
    value = json_arg(input, "input")
    result = operate(
        remote,
        lambda op: op.start(workflow, value, idempotency_key, priority, wait),
    )
    if remote.as_json:
        print_json(result)
    elif wait is None:
        out().print(f"run {result['runId']} {result['status']}")
    elif result.get("timedOut"):
        raise fail(f"run {result['runId']} is still {result['status']} after {wait:g}s")
    elif result["status"] == "completed":
        out().print(f"run {result['runId']} completed: {json.dumps(result.get('output'))}")
    else:
        raise fail(f"run {result['runId']} {result['status']}: {error_text(result['error'])}")


@operator_command(app.command("start"))
def start(
    remote: Remote,
    workflow: WorkflowArg,
    input: InputArg = None,
    idempotency_key: KeyOpt = None,
    wait: WaitOpt = None,
) -> None:
    """Start a run of WORKFLOW (same as `ripple runs start`); `--wait 30` waits for its end."""
    runs_start(remote, workflow, input, idempotency_key, 0, wait)


@operator_command(runs_app.command("retry"))
def runs_retry(
    remote: Remote,
    run_id: Annotated[str, typer.Argument(help="Run id of a failed or canceled run.")],
) -> None:
    """Resume a failed or canceled run from its failed step (recorded steps keep results)."""
    result = operate(remote, lambda op: op.retry(run_id))
    emit(remote.as_json, result, lambda r: f"run {run_id} {r['status']} again")


@operator_command(runs_app.command("fork"))
def runs_fork(
    remote: Remote,
    run_id: Annotated[str, typer.Argument(help="Run id to fork.")],
    from_step: Annotated[str, typer.Option("--from-step", help="Step key to run again from.")],
    input: Annotated[
        str | None, typer.Option("--input", help="New JSON input (default: the original's).")
    ] = None,
) -> None:
    """Start a new run from RUN_ID's journal up to (not including) --from-step."""
    value = json_arg(input, "--input")
    result = operate(remote, lambda op: op.fork(run_id, from_step, value))
    emit(
        remote.as_json,
        result,
        lambda r: f"run {r['runId']} forked from {run_id} at step {from_step}",
    )


def _bulk(remote: Remote, action: str, verb: str, flt: dict[str, Any], yes: bool) -> None:
    def run(dry_run: bool) -> int:
        return operate(remote, lambda op: op.bulk(action, flt, dry_run), writes=not dry_run)

    if not yes:
        matching = run(True)
        if matching == 0:
            out().print("no run matches")
            return
        if not typer.confirm(f"{matching} run(s) match; {action} them?", err=True):
            raise fail("aborted; nothing changed")
    count = run(False)
    emit(remote.as_json, {"count": count}, lambda _: f"{verb} {count} run(s)")


def _filter(
    workflow: str | None,
    status: str | None,
    since: str | None,
    until: str | None,
    created_before: str | None,
) -> dict[str, Any]:
    return {
        "workflow": workflow,
        "status": status,
        "since": time_arg(since, "--since"),
        "until": time_arg(until, "--until"),
        "created_before": time_arg(created_before, "--created-before"),
    }


@operator_command(runs_app.command("cancel-many"))
def runs_cancel_many(
    remote: Remote,
    workflow: WorkflowOpt = None,
    status: Annotated[
        str | None, typer.Option("--status", help="pending, running, sleeping or waiting.")
    ] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    created_before: BeforeOpt = None,
    yes: YesOpt = False,
) -> None:
    """Cancel every active run matching the filters (shows the count and asks first)."""
    flt = _filter(workflow, status, since, until, created_before)
    _bulk(remote, "cancel", "canceled", flt, yes)


@operator_command(runs_app.command("retry-many"))
def runs_retry_many(
    remote: Remote,
    workflow: WorkflowOpt = None,
    status: Annotated[str | None, typer.Option("--status", help="failed or canceled.")] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    created_before: BeforeOpt = None,
    yes: YesOpt = False,
) -> None:
    """Retry every failed or canceled run matching the filters (shows the count and asks
    first)."""
    flt = _filter(workflow, status, since, until, created_before)
    _bulk(remote, "retry", "retried", flt, yes)


@operator_command(runs_app.command("list"))
def runs_list(
    remote: Remote,
    workflow: Annotated[str | None, typer.Option(help="Only runs of this workflow.")] = None,
    status: Annotated[str | None, typer.Option(help="pending, running, sleeping, …")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Page size.")] = 20,
    cursor: Annotated[str | None, typer.Option(help="`nextCursor` of the previous page.")] = None,
    where: Annotated[
        str | None,
        typer.Option(help="Search: 'customer = \"acme\" and amount > 100' (docs/search.md)."),
    ] = None,
) -> None:
    """List runs, newest first."""
    page = operate(
        remote,
        lambda op: op.list_runs(workflow, status, limit, cursor, where),
        writes=False,
    )
    if remote.as_json:
        print_json(page)
        return
    rows = [
        [
            r["runId"],
            r["workflow"],
            r["status"] + (f" ({r['blockedBy']})" if r.get("blockedBy") else ""),
            short_time(r.get("createdAt"))[:19],
            error_text(r.get("error")),
        ]
        for r in page["items"]
    ]
    table("runs", ["run id", "workflow", "status", "created", "error"], rows)
    if page.get("nextCursor"):
        out().print(f"more: --cursor {page['nextCursor']}")


@operator_command(runs_app.command("show"))
def runs_show(remote: Remote, run_id: RunIdArg) -> None:
    """Show a run and its step timeline (durations, attempts, errors)."""

    async def both(op: Operator) -> tuple[Any, Any]:
        return await op.get_run(run_id), await op.steps(run_id)

    run, steps = operate(remote, both, writes=False)
    if remote.as_json:
        print_json({**run, "steps": steps})
        return
    out().print(
        f"[bold]run {run['runId']}[/bold]  {run['workflow']} v{run.get('version')}  "
        f"[bold]{run['status']}[/bold]"
        + (f"  blocked by {run['blockedBy']}" if run.get("blockedBy") else ""),
        highlight=False,
    )
    out().print(
        f"created {short_time(run.get('createdAt'))}  "
        f"completed {short_time(run.get('completedAt')) or '-'}",
        highlight=False,
    )
    out().print(f"input  {json.dumps(run.get('input'))}", highlight=False)
    if run.get("output") is not None:
        out().print(f"output {json.dumps(run.get('output'))}", highlight=False)
    if run.get("error"):
        out().print(f"[red]error  {error_text(run['error'])}[/red]", highlight=False)
    rows = [
        [
            s["key"],
            s["kind"],
            s["status"],
            s.get("attempts"),
            clock(s.get("startedAt")),
            duration(s.get("durationMs")),
            error_text(s.get("error")),
        ]
        for s in steps
    ]
    table("steps", ["step", "kind", "status", "attempts", "started", "duration", "error"], rows)


@operator_command(runs_app.command("cancel"), json_output=False)
def runs_cancel(remote: Remote, run_id: RunIdArg) -> None:
    """Cancel a run (and its children)."""
    if operate(remote, lambda op: op.cancel(run_id)):
        out().print(f"run {run_id} canceled")
    else:
        out().print(f"run {run_id} had already ended")


@operator_command(runs_app.command("signal"))
def runs_signal(
    remote: Remote,
    run_id: RunIdArg,
    name: Annotated[str, typer.Argument(help="Wait name.")],
    payload: PayloadArg = None,
    idempotency_key: RetrySafeKeyOpt = None,
) -> None:
    """Signal one run's wait NAME (buffered if the run is not waiting yet)."""
    value = json_arg(payload, "payload")
    result = operate(remote, lambda op: op.signal(run_id, name, value, idempotency_key))
    emit(
        remote.as_json,
        result,
        lambda r: "delivered" if r["delivered"] else "buffered until the run waits for it",
    )
