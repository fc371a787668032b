"""Queue commands: the `ripple queues` group."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ripple.platform.cli.groups import queues_app
from ripple.platform.cli.operate import operate
from ripple.platform.cli.options import QueueArg, Remote, json_arg, operator_command
from ripple.platform.cli.output import emit, print_json, table

__all__ = ["queues_dead_letters", "queues_receive", "queues_redrive", "queues_send", "queues_stats"]


@operator_command(queues_app.command("send"))
def queues_send(
    remote: Remote,
    queue: QueueArg,
    body: Annotated[str | None, typer.Argument(help="JSON body.")] = None,
    group_id: Annotated[str | None, typer.Option("--group-id", help="FIFO group.")] = None,
    delay: Annotated[float | None, typer.Option(help="Seconds before visible.")] = None,
) -> None:
    """Send a message to QUEUE."""
    value = json_arg(body, "body")
    result = operate(remote, lambda op: op.queue_send(queue, value, group_id, delay))
    emit(remote.as_json, result, lambda r: f"sent {r.get('id') or ''} to {queue}")


@operator_command(queues_app.command("receive"))
def queues_receive(
    remote: Remote,
    queue: QueueArg,
    max_messages: Annotated[int, typer.Option("--max", min=1, max=1000)] = 10,
    visibility_timeout: Annotated[float, typer.Option(help="Seconds invisible.")] = 30.0,
    wait: Annotated[float, typer.Option(help="Long-poll seconds.", max=20)] = 0.0,
    ack: Annotated[bool, typer.Option("--ack/--no-ack", help="Ack what was received.")] = False,
    fair: Annotated[
        bool, typer.Option("--fair", help="Round robin across groups, FIFO within each.")
    ] = False,
) -> None:
    """Receive messages from QUEUE (and ack them with --ack)."""
    messages = operate(
        remote,
        lambda op: op.queue_receive(queue, max_messages, visibility_timeout, wait, ack, fair),
    )
    if remote.as_json:
        print_json(messages)
        return
    rows = [
        [m["id"], json.dumps(m.get("body")), m.get("receiveCount"), m["receipt"]] for m in messages
    ]
    table(f"{queue}: {len(messages)} message(s)", ["id", "body", "receives", "receipt"], rows)


@operator_command(queues_app.command("stats"))
def queues_stats(remote: Remote, queue: QueueArg) -> None:
    """Depth, in-flight and dead-letter counts of QUEUE."""
    result = operate(remote, lambda op: op.queue_stats(queue), writes=False)
    if remote.as_json:
        print_json(result)
        return
    table(queue, ["stat", "value"], [[k, v] for k, v in result.items()])


@operator_command(queues_app.command("dead-letters"))
def queues_dead_letters(
    remote: Remote, queue: QueueArg, limit: Annotated[int, typer.Option(min=1)] = 50
) -> None:
    """List the dead letters of QUEUE."""
    result = operate(remote, lambda op: op.queue_dead_letters(queue, limit), writes=False)
    if remote.as_json:
        print_json(result)
        return
    rows = [[m.get("id"), json.dumps(m.get("body")), m.get("receiveCount")] for m in result]
    table(f"{queue} dead letters", ["id", "body", "receives"], rows)


@operator_command(queues_app.command("redrive"))
def queues_redrive(remote: Remote, queue: QueueArg) -> None:
    """Move QUEUE's dead letters back onto it."""
    result = operate(remote, lambda op: op.queue_redrive(queue))
    emit(remote.as_json, result, lambda r: f"redrove {r['redriven']} message(s)")
