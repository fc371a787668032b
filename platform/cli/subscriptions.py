"""Subscription commands: `ripple subscribe`, `unsubscribe`, `pause`, `resume`, and the
`ripple subscriptions` group (list, `replay`)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from ripple.platform.cli.groups import app, subscriptions_app
from ripple.platform.cli.operate import operate
from ripple.platform.cli.options import (
    Remote,
    SubscriptionIdArg,
    json_arg,
    operator_command,
    time_arg,
)
from ripple.platform.cli.output import emit, fail, out, print_json, table, target_text

__all__ = ["pause", "resume", "subscribe", "subscriptions", "subscriptions_replay", "unsubscribe"]


@operator_command(app.command())
def subscribe(
    remote: Remote,
    pattern: Annotated[str, typer.Argument(help="Topic pattern: `*` one segment, `#` any.")],
    queue: Annotated[str | None, typer.Option(help="Deliver to this queue.")] = None,
    workflow: Annotated[str | None, typer.Option(help="Start this workflow per event.")] = None,
    webhook: Annotated[str | None, typer.Option(help="POST events to this URL.")] = None,
    secret: Annotated[str | None, typer.Option(help="Webhook secret (whsec_…).")] = None,
    filter: Annotated[
        str | None, typer.Option("--filter", help="Only payloads containing this JSON.")
    ] = None,
    backfill_since: Annotated[
        str | None,
        typer.Option(
            "--backfill-since",
            help="Also deliver the retained events published since this ISO-8601 time.",
        ),
    ] = None,
) -> None:
    """Subscribe a queue, workflow or webhook to a topic pattern (exactly one target)."""
    targets = [t for t in (queue, workflow, webhook) if t is not None]
    if len(targets) != 1:
        raise fail("give exactly one of --queue, --workflow, --webhook", 2)
    target: dict[str, Any]
    if queue is not None:
        target = {"type": "queue", "queue": queue}
    elif workflow is not None:
        target = {"type": "workflow", "workflow": workflow}
    else:
        target = {"type": "webhook", "url": webhook}
        if secret:
            target["secret"] = secret
    match = json_arg(filter, "--filter")
    since = time_arg(backfill_since, "--backfill-since")
    result = operate(remote, lambda op: op.subscribe(pattern, target, match, since))
    if remote.as_json:
        print_json(result)
        return
    out().print(f"subscription {result['id']}: {pattern} -> {target_text(result['target'])}")
    if since is not None:
        out().print(f"backfilled {result.get('backfillDelivered', 0)} event(s)")
    if result["target"].get("secret"):
        out().print(f"webhook secret (shown once): {result['target']['secret']}")


@operator_command(app.command(), json_output=False)
def unsubscribe(remote: Remote, subscription_id: SubscriptionIdArg) -> None:
    """Delete a subscription."""
    if not operate(remote, lambda op: op.unsubscribe(subscription_id)):
        raise fail(f"no subscription {subscription_id}")
    out().print(f"subscription {subscription_id} deleted")


@operator_command(app.command())
def pause(remote: Remote, subscription_id: SubscriptionIdArg) -> None:
    """Stop delivering events to a subscription until it is resumed (events still publish)."""
    _set_paused(remote, subscription_id, True)


@operator_command(app.command())
def resume(remote: Remote, subscription_id: SubscriptionIdArg) -> None:
    """Deliver to a paused (or disabled) subscription again, from the next event on."""
    _set_paused(remote, subscription_id, False)


def _set_paused(remote: Remote, subscription_id: str, paused: bool) -> None:
    result = operate(remote, lambda op: op.set_paused(subscription_id, paused))
    emit(remote.as_json, result, lambda r: f"subscription {subscription_id} is {r['status']}")


@operator_command(subscriptions_app.callback(invoke_without_command=True))
def subscriptions(remote: Remote, ctx: typer.Context) -> None:
    """List subscriptions (or replay events to one: `ripple subscriptions replay`)."""
    if ctx.invoked_subcommand is not None:
        return
    result = operate(remote, lambda op: op.subscriptions(), writes=False)
    if remote.as_json:
        print_json(result)
        return
    rows = [
        [
            s["id"],
            s["pattern"],
            target_text(s["target"]),
            json.dumps(s.get("filter")),
            s.get("status"),
        ]
        for s in result
    ]
    table("subscriptions", ["id", "pattern", "target", "filter", "status"], rows)


@operator_command(subscriptions_app.command("replay"))
def subscriptions_replay(
    remote: Remote,
    subscription_id: SubscriptionIdArg,
    since: Annotated[str, typer.Option("--since", help="ISO-8601: events created from then.")],
    until: Annotated[
        str | None, typer.Option("--until", help="ISO-8601: ...and before then (default now).")
    ] = None,
) -> None:
    """Re-deliver the retained events of a time range to this subscription only."""
    start = time_arg(since, "--since")
    assert start is not None
    end = time_arg(until, "--until")
    count = operate(remote, lambda op: op.replay(subscription_id, start, end))
    emit(
        remote.as_json,
        {"replayed": count},
        lambda _: f"replayed {count} event(s) to subscription {subscription_id}",
    )
