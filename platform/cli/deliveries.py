"""Webhook delivery commands: the `ripple deliveries` group."""

from __future__ import annotations

from typing import Annotated

import typer

from ripple.platform.cli.groups import deliveries_app
from ripple.platform.cli.operate import operate
from ripple.platform.cli.options import Remote, operator_command
from ripple.platform.cli.output import emit, fail, print_json, table

__all__ = [
    "deliveries_endpoint",
    "deliveries_list",
    "deliveries_redrive",
    "deliveries_resume",
]


@operator_command(deliveries_app.command("list"))
def deliveries_list(
    remote: Remote,
    status: Annotated[str | None, typer.Option(help="pending, delivered, failed, …")] = None,
    limit: Annotated[int, typer.Option(min=1)] = 20,
    cursor: Annotated[str | None, typer.Option()] = None,
) -> None:
    """List webhook deliveries, newest first."""
    page = operate(remote, lambda op: op.deliveries(status, limit, cursor), writes=False)
    if remote.as_json:
        print_json(page)
        return
    rows = [
        [
            d.get("id"),
            d.get("topic"),
            d.get("status"),
            d.get("attempts"),
            d.get("lastStatusCode"),
            d.get("lastError"),
        ]
        for d in page["items"]
    ]
    table("deliveries", ["id", "topic", "status", "attempts", "last code", "last error"], rows)


@operator_command(deliveries_app.command("redrive"))
def deliveries_redrive(
    remote: Remote,
    delivery_id: Annotated[str | None, typer.Argument(help="Delivery id.")] = None,
    all_failed: Annotated[bool, typer.Option("--all-failed", help="Every failed one.")] = False,
) -> None:
    """Deliver a failed delivery again (or every failed one with --all-failed)."""
    if (delivery_id is None) == (not all_failed):
        raise fail("give a delivery id or --all-failed", 2)
    result = operate(remote, lambda op: op.delivery_redrive(delivery_id))
    emit(remote.as_json, result, lambda r: f"redrove {r['redriven']} delivery(ies)")


def _endpoint_line(e: dict[str, object]) -> str:
    line = f"{e['subscriptionId']}: circuit {e['circuit']}, {e['consecutiveFailures']} failure(s)"
    line += f" in a row, {e['inFlight']} in flight"
    if e.get("nextProbeAt"):
        line += f", next probe at {e['nextProbeAt']}"
    return line


@operator_command(deliveries_app.command("endpoint"))
def deliveries_endpoint(
    remote: Remote,
    subscription_id: Annotated[str, typer.Argument(help="Webhook subscription id.")],
) -> None:
    """Show a webhook endpoint's circuit breaker and deliveries in flight."""
    result = operate(remote, lambda op: op.endpoint(subscription_id), writes=False)
    emit(remote.as_json, result, _endpoint_line)


@operator_command(deliveries_app.command("resume"))
def deliveries_resume(
    remote: Remote,
    subscription_id: Annotated[str, typer.Argument(help="Webhook subscription id.")],
) -> None:
    """Resume a webhook endpoint now: close its circuit, send its waiting deliveries at once."""
    result = operate(remote, lambda op: op.endpoint(subscription_id, resume=True))
    emit(remote.as_json, result, lambda e: "resumed " + _endpoint_line(e))
