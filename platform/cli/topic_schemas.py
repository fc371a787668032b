"""Topic schema commands: `ripple topics schema register|check|show TOPIC [FILE]`."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ripple.platform.cli.groups import topic_schemas_app
from ripple.platform.cli.operate import operate
from ripple.platform.cli.options import Remote, json_arg, operator_command
from ripple.platform.cli.output import emit, fail, out, print_json

__all__ = ["check", "register", "show"]

TopicArg = Annotated[str, typer.Argument(help="Topic, e.g. user.signup.")]
FileArg = Annotated[
    str,
    typer.Argument(help="JSON Schema (draft 2020-12) file; `-` reads stdin."),
]


def _schema(file: str) -> Any:
    schema = json_arg(file if file == "-" else f"@{file}", "schema")
    if not isinstance(schema, dict):
        raise fail("the schema must be a JSON object (a JSON Schema document)", 2)
    return schema


@operator_command(topic_schemas_app.command("register"))
def register(
    remote: Remote,
    topic: TopicArg,
    file: FileArg,
    compatibility: Annotated[
        str | None,
        typer.Option(
            "--compatibility",
            help="Set the topic's mode: backward (default), forward, full, none, or a "
            "_transitive form.",
        ),
    ] = None,
) -> None:
    """Register FILE as TOPIC's next schema version (the same schema again is a no-op); exits 1
    listing each problem when it breaks the topic's compatibility rule."""
    schema = _schema(file)
    result = operate(remote, lambda op: op.register_schema(topic, schema, compatibility))
    emit(
        remote.as_json,
        result,
        lambda r: (
            f"{topic}: schema version {r['version']} ({r['compatibility']})"
            + (" already registered" if r.get("created") is False else "")
        ),
    )


@operator_command(topic_schemas_app.command("check"))
def check(remote: Remote, topic: TopicArg, file: FileArg) -> None:
    """Say whether FILE could be registered for TOPIC now (exit 1 with the problems if not);
    registers nothing. For CI."""
    schema = _schema(file)
    result = operate(remote, lambda op: op.check_schema(topic, schema), writes=False)
    if remote.as_json:
        print_json(result)
    elif result["compatible"]:
        out().print(f"{topic}: compatible")
    else:
        out().print(f"{topic}: incompatible")
        for problem in result["problems"]:
            out().print(f"  {problem}", highlight=False)
    if not result["compatible"]:
        raise typer.Exit(1)


@operator_command(topic_schemas_app.command("show"))
def show(
    remote: Remote,
    topic: TopicArg,
    version: Annotated[
        int | None, typer.Option("--version", "-v", min=1, help="Default: the latest.")
    ] = None,
) -> None:
    """Print one schema version of TOPIC (the latest by default)."""
    result = operate(remote, lambda op: op.get_schema(topic, version), writes=False)
    if result is None:
        which = "any schema" if version is None else f"schema version {version}"
        raise fail(
            f"topic {topic!r} has no {which}; register one with `ripple topics schema register`"
        )
    if remote.as_json:
        print_json(result)
        return
    out().print(f"{topic} version {result['version']} ({result['compatibility']})")
    print_json(result["schema"])
