"""The root `ripple` Typer app and its command groups, before any command is registered.

Plain help everywhere (`rich_markup_mode=None`): typer's rich help rendering alone costs more
than the whole startup budget.
"""

from __future__ import annotations

import typer

__all__ = [
    "app",
    "deliveries_app",
    "queues_app",
    "runs_app",
    "schedules_app",
    "subscriptions_app",
    "tokens_app",
    "topic_schemas_app",
    "topics_app",
]

app = typer.Typer(
    name="ripple",
    help="Ripple: topics, subscriptions, queues, webhooks and durable workflows on Postgres.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
runs_app = typer.Typer(
    help="Inspect and control workflow runs.", no_args_is_help=True, rich_markup_mode=None
)
subscriptions_app = typer.Typer(
    help="List subscriptions and replay events to one.", rich_markup_mode=None
)
queues_app = typer.Typer(
    help="Send, receive and inspect durable queues.", no_args_is_help=True, rich_markup_mode=None
)
deliveries_app = typer.Typer(
    help="Inspect and redrive webhook deliveries.", no_args_is_help=True, rich_markup_mode=None
)
schedules_app = typer.Typer(
    help="Create and operate schedules.", no_args_is_help=True, rich_markup_mode=None
)
tokens_app = typer.Typer(
    help="Create, list and revoke API tokens.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(runs_app, name="runs")
app.add_typer(subscriptions_app, name="subscriptions")
app.add_typer(queues_app, name="queues")
app.add_typer(deliveries_app, name="deliveries")
app.add_typer(schedules_app, name="schedules")
topics_app = typer.Typer(
    help="Topic contracts: schemas and the AsyncAPI document.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
topic_schemas_app = typer.Typer(
    help="Register, check and show topic schemas.", no_args_is_help=True, rich_markup_mode=None
)
topics_app.add_typer(topic_schemas_app, name="schema")
app.add_typer(topics_app, name="topics")
app.add_typer(tokens_app, name="tokens")
