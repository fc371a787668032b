"""Schedule commands: the `ripple schedules` group."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ripple.platform.cli.groups import schedules_app
from ripple.platform.cli.operate import operate
from ripple.platform.cli.options import Remote, ScheduleArg, json_arg, operator_command
from ripple.platform.cli.output import emit, fail, out, print_json, short_time, table

__all__ = [
    "schedules_create",
    "schedules_delete",
    "schedules_list",
    "schedules_pause",
    "schedules_resume",
    "schedules_trigger",
]


@operator_command(schedules_app.command("list"))
def schedules_list(remote: Remote) -> None:
    """List schedules with their next tick."""
    result = operate(remote, lambda op: op.schedules(), writes=False)
    if remote.as_json:
        print_json(result)
        return
    rows = [
        [
            s["name"],
            f"workflow {s['workflow']}" if s.get("workflow") else f"topic {s['topic']}",
            s.get("cron") or f"every {s.get('everySeconds')}s",
            s.get("timezone"),
            "paused" if s.get("paused") else short_time(s.get("nextRunAt"))[:19],
            s.get("source"),
        ]
        for s in result
    ]
    table("schedules", ["name", "fires", "cadence", "timezone", "next", "source"], rows)


@operator_command(schedules_app.command("create"))
def schedules_create(
    remote: Remote,
    name: ScheduleArg,
    workflow: Annotated[str | None, typer.Option(help="Start runs of this workflow.")] = None,
    topic: Annotated[str | None, typer.Option(help="Or publish events to this topic.")] = None,
    cron: Annotated[str | None, typer.Option(help="Cron expression, e.g. '0 3 * * *'.")] = None,
    every: Annotated[float | None, typer.Option(help="Or seconds between ticks.")] = None,
    timezone: Annotated[str, typer.Option(help="IANA time zone of the cron.")] = "UTC",
    input: Annotated[str | None, typer.Option(help="JSON input (or event payload).")] = None,
    overlap: Annotated[str, typer.Option(help="skip | allow")] = "skip",
) -> None:
    """Create (or replace) a schedule."""
    body = {
        "name": name,
        "workflow": workflow,
        "topic": topic,
        "cron": cron,
        "every": every,
        "timezone": timezone,
        "input": json_arg(input, "input"),
        "overlap": overlap,
    }
    result = operate(remote, lambda op: op.schedule_create(body))
    emit(remote.as_json, result, lambda r: f"schedule {r['name']} next at {r.get('nextRunAt')}")


def _action(remote: Remote, name: str, action: str) -> Any:
    return operate(remote, lambda op: op.schedule_action(name, action))


@operator_command(schedules_app.command("pause"), json_output=False)
def schedules_pause(remote: Remote, name: ScheduleArg) -> None:
    """Stop firing a schedule until it is resumed."""
    _action(remote, name, "pause")
    out().print(f"schedule {name} paused")


@operator_command(schedules_app.command("resume"), json_output=False)
def schedules_resume(remote: Remote, name: ScheduleArg) -> None:
    """Fire a paused schedule again from its next tick on."""
    result = _action(remote, name, "resume")
    out().print(f"schedule {name} resumed, next at {result.get('nextRunAt')}")


@operator_command(schedules_app.command("trigger"), json_output=False)
def schedules_trigger(remote: Remote, name: ScheduleArg) -> None:
    """Fire a schedule once now, outside its cadence."""
    result = _action(remote, name, "trigger")
    out().print(f"schedule {name} fired" + (f": run {result['runId']}" if result["runId"] else ""))


@operator_command(schedules_app.command("delete"), json_output=False)
def schedules_delete(remote: Remote, name: ScheduleArg) -> None:
    """Delete a schedule."""
    if not operate(remote, lambda op: op.schedule_delete(name)):
        raise fail(f"no schedule {name}")
    out().print(f"schedule {name} deleted")
