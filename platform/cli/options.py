"""Options and arguments several commands share, and the parsing of JSON and time values.

`operator_command` gives an operator command its `--api`, `--token` (and `--json`) options: the
function declares only its own parameters after a first `remote: Remote`.
"""

from __future__ import annotations

import functools
import inspect
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from ripple.platform.cli.output import fail
from ripple.platform.core.durations import parse_duration

__all__ = [
    "BeforeOpt",
    "PayloadArg",
    "QueueArg",
    "Remote",
    "RetrySafeKeyOpt",
    "RunIdArg",
    "ScheduleArg",
    "SinceOpt",
    "SubscriptionIdArg",
    "UntilOpt",
    "WaitOpt",
    "WorkflowOpt",
    "YesOpt",
    "json_arg",
    "operator_command",
    "time_arg",
]

ApiOpt = Annotated[
    str | None,
    typer.Option(
        "--api",
        envvar="RIPPLE_API_URL",
        help="Talk to this Ripple API (e.g. http://127.0.0.1:8080) instead of the database.",
    ),
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", envvar="RIPPLE_API_TOKEN", help="Bearer token for --api.")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")]

RunIdArg = Annotated[str, typer.Argument(help="Run id.")]
SubscriptionIdArg = Annotated[str, typer.Argument(help="Subscription id.")]
QueueArg = Annotated[str, typer.Argument(help="Queue name.")]
ScheduleArg = Annotated[str, typer.Argument(help="Schedule name.")]
PayloadArg = Annotated[str | None, typer.Argument(help="JSON payload.")]
RetrySafeKeyOpt = Annotated[
    str | None, typer.Option("--idempotency-key", "-k", help="Retry-safe: dedupe repeats.")
]
WaitOpt = Annotated[
    float | None,
    typer.Option(
        "--wait",
        help="Wait up to this many seconds (at most 60) for the run to end; print its output.",
        min=0,
        max=60,
    ),
]
WorkflowOpt = Annotated[str | None, typer.Option("--workflow", "-w", help="Workflow name.")]
SinceOpt = Annotated[str | None, typer.Option("--since", help="Created at or after (ISO-8601).")]
UntilOpt = Annotated[str | None, typer.Option("--until", help="Created before (ISO-8601).")]
BeforeOpt = Annotated[
    str | None, typer.Option("--created-before", help="Created before (ISO-8601).")
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


@dataclass(frozen=True, slots=True)
class Remote:
    """Where an operator command sends its request (`--api`, `--token`; None: this process on
    the database) and whether it prints JSON (`--json`)."""

    api: str | None = None
    token: str | None = None
    as_json: bool = False


Command = Callable[..., None]


def operator_command(
    register: Callable[[Command], Command], *, json_output: bool = True
) -> Callable[[Command], Command]:
    """Register `func(remote, ...)` with `register` (e.g. `app.command()`) as a command whose
    options are func's own followed by `--api`, `--token` and, with `json_output`, `--json`.

    Returns `func` unchanged, so commands can call each other with a `Remote`.
    """

    def decorate(func: Command) -> Command:
        own = list(inspect.signature(func, eval_str=True).parameters.values())[1:]
        shared = [_keyword("api", None, ApiOpt), _keyword("token", None, TokenOpt)]
        if json_output:
            shared.append(_keyword("as_json", False, JsonOpt))

        @functools.wraps(func)
        def command(
            *args: Any,
            api: str | None = None,
            token: str | None = None,
            as_json: bool = False,
            **kwargs: Any,
        ) -> None:
            func(Remote(api, token, as_json), *args, **kwargs)

        params = own + shared
        # typer reads the options from the signature and the type hints: give it the new ones.
        command.__signature__ = inspect.Signature(params, return_annotation=None)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
        register(command)
        return func

    return decorate


def _keyword(name: str, default: object, annotation: object) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def time_arg(text: str | None, what: str) -> datetime | None:
    """Parse an ISO-8601 time option (UTC when it has no offset)."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise fail(f"{what} must be an ISO-8601 time such as 2026-01-31T12:00:00Z", 2) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def duration_arg(text: str, what: str) -> timedelta:
    """`90d`, `12h`, `30m`, `45s`, `2w` or plain seconds as a timedelta; exit 2 otherwise."""
    seconds = parse_duration(text)
    if seconds is None or seconds <= 0:
        raise fail(f"{what} must be a positive duration such as 7d, 12h or 30m, not {text!r}", 2)
    return timedelta(seconds=seconds)


def since_arg(text: str | None, what: str) -> datetime | None:
    """A time option given as a duration back from now (`7d`, `12h`) or an ISO-8601 time."""
    if text is None:
        return None
    if parse_duration(text) is not None:
        return datetime.now(UTC) - duration_arg(text, what)
    return time_arg(text, what)


def json_arg(text: str | None, what: str) -> Any:
    """Parse a JSON argument; `-` reads stdin, `@path` reads a file, absent means null."""
    if text is None:
        return None
    if text == "-":
        text = sys.stdin.read()
    elif text.startswith("@"):
        text = Path(text[1:]).read_text()
    try:
        return json.loads(text)
    except ValueError as exc:
        raise fail(
            f"{what} is not valid JSON ({exc}); quote it, e.g. '{{\"userId\": 42}}'", 2
        ) from None
