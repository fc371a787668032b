"""Event commands: `ripple publish`, `explain` and `signal` (resume runs waiting on an event)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ripple.platform.cli.groups import app, topics_app
from ripple.platform.cli.operate import operate
from ripple.platform.cli.options import (
    PayloadArg,
    Remote,
    RetrySafeKeyOpt,
    json_arg,
    operator_command,
)
from ripple.platform.cli.output import emit, out, print_json, table, target_text

__all__ = ["asyncapi", "explain", "publish", "signal"]

TopicArg = Annotated[str, typer.Argument(help="Topic, e.g. user.signup.")]


@operator_command(app.command())
def publish(
    remote: Remote,
    topic: TopicArg,
    payload: Annotated[
        str | None, typer.Argument(help="JSON payload; `-` reads stdin, `@file` a file.")
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", "-k", help="Dedupe repeats.")
    ] = None,
) -> None:
    """Publish an event and fan it out to matching subscriptions."""
    value = json_arg(payload, "payload")
    result = operate(remote, lambda op: op.publish(topic, value, idempotency_key))

    def text(result: Any) -> str:
        resumed = result.get("waitsResolved") or 0
        note = f", {resumed} waiting run(s) resumed" if resumed else ""
        again = " (duplicate: already published)" if result.get("duplicate") else ""
        return (
            f"event {result['eventId']} published to {topic}{again}: "
            f"{result['deliveries']} deliveries{note}"
        )

    emit(remote.as_json, result, text)


@operator_command(app.command())
def explain(remote: Remote, topic: TopicArg, payload: PayloadArg = None) -> None:
    """Dry run: which subscriptions and waiting runs an event would reach, and why not others."""
    value = json_arg(payload, "payload")
    result = operate(remote, lambda op: op.explain(topic, value), writes=False)
    if remote.as_json:
        print_json(result)
        return
    rows = [
        [
            v["subscriptionId"],
            v["pattern"],
            target_text(v["target"]),
            v["status"],
            "yes" if v["matched"] else "no",
            v.get("reason") or "",
        ]
        for v in result.get("subscriptions", [])
    ]
    table(f"{topic}", ["subscription", "pattern", "target", "status", "delivers", "why not"], rows)
    if result.get("waits") is not None:
        out().print(f"waiting runs it would resume: {result['waits']}")


@operator_command(app.command())
def signal(
    remote: Remote,
    event: Annotated[str, typer.Argument(help="Event name the runs wait on.")],
    payload: PayloadArg = None,
    idempotency_key: RetrySafeKeyOpt = None,
) -> None:
    """Resume every run waiting on EVENT whose match the payload contains."""
    value = json_arg(payload, "payload")
    result = operate(
        remote,
        lambda op: op.signal_matching(event, value, idempotency_key),
    )
    emit(remote.as_json, result, lambda r: f"resumed {r['resumed']} run(s)")


@operator_command(topics_app.command("asyncapi"))
def asyncapi(remote: Remote) -> None:
    """Print the AsyncAPI 3.0.0 document of the topics that have a schema (JSON)."""
    print_json(operate(remote, lambda op: op.asyncapi(), writes=False))
