"""The `ripple` command: processes (`dev`, `serve`, `worker`, `migrate`) and operator commands.

Operator commands always go through the REST API: a remote one with `--api URL --token T`, or by
default the same app served inside this process on the database (`httpx.ASGITransport`), so
each operator action has one implementation, the route. They print the REST API's JSON shapes
with `--json`. Rendering lives here; the HTTP calls in `ripple.platform.api.operator`,
processes in `ripple.platform.api.server`.
"""

from __future__ import annotations

import functools
import ipaddress
import json
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

# Only what `ripple --help` needs is imported here: every heavy module (pydantic, FastAPI,
# asyncpg, aiohttp, rich, structlog, the workflows engine) is imported by the command that uses
# it, so the CLI starts fast (bench/cli_startup.py measures it; tests/unit/platform/
# test_cli_imports.py keeps it so).
if TYPE_CHECKING:
    from rich.console import Console

    from ripple.platform.api.operator import ApiOperator
    from ripple.platform.config import Settings

__all__ = ["app", "main"]

T = TypeVar("T")

app = typer.Typer(
    name="ripple",
    help="Ripple: topics, subscriptions, queues, webhooks and durable workflows on Postgres.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: typer's rich help rendering alone costs more than the whole startup budget.
    rich_markup_mode=None,
)
runs_app = typer.Typer(
    help="Inspect and control workflow runs.", no_args_is_help=True, rich_markup_mode=None
)
queues_app = typer.Typer(
    help="Send, receive and inspect durable queues.", no_args_is_help=True, rich_markup_mode=None
)
deliveries_app = typer.Typer(
    help="Inspect and redrive webhook deliveries.", no_args_is_help=True, rich_markup_mode=None
)
subscriptions_app = typer.Typer(
    help="List subscriptions and replay events to one.", rich_markup_mode=None
)
app.add_typer(runs_app, name="runs")
app.add_typer(subscriptions_app, name="subscriptions")
app.add_typer(queues_app, name="queues")
schedules_app = typer.Typer(
    help="Create and operate schedules.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(deliveries_app, name="deliveries")
app.add_typer(schedules_app, name="schedules")


@functools.cache
def _out() -> Console:
    """Standard output. Piped output (not a terminal) gets a wide console, so tables never wrap
    ids in files or tests."""
    from rich.console import Console

    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 160)


@functools.cache
def _err() -> Console:
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


# -- shared options ------------------------------------------------------------------------

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


def _fail(message: str, code: int = 1) -> typer.Exit:
    _err().print(f"[red]error:[/red] {message}", highlight=False)
    return typer.Exit(code)


def _settings(**overrides: Any) -> Settings:
    from ripple.platform.config import load_settings
    from ripple.platform.errors import ConfigError

    try:
        return load_settings(**overrides)
    except ConfigError as exc:
        raise _fail(exc.message, 2) from None


def _time_arg(text: str | None, what: str) -> datetime | None:
    """Parse an ISO-8601 time option (UTC when it has no offset)."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise _fail(f"{what} must be an ISO-8601 time such as 2026-01-31T12:00:00Z", 2) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _json_arg(text: str | None, what: str) -> Any:
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
        raise _fail(
            f"{what} is not valid JSON ({exc}); quote it, e.g. '{{\"userId\": 42}}'", 2
        ) from None


def _operate(
    api: str | None, token: str | None, action: Callable[[ApiOperator], Awaitable[T]]
) -> T:
    """Run `action` over HTTP: against the API given with --api, or against the app served in
    this process on the database (`httpx.ASGITransport`); failures exit 1 with the message."""
    import asyncio

    from ripple.platform.api.operator import ApiOperator, OperatorError
    from ripple.platform.errors import RippleError
    from ripple.platform.logs import configure_logging

    configure_logging(level="warning")

    async def go() -> T:
        if api:
            async with ApiOperator(api, token) as remote:
                return await action(remote)
        import httpx

        from ripple.platform.api.app import create_app
        from ripple.platform.client import Client

        async with Client(settings=_settings()) as client:
            tokens = client.settings.api_tokens
            transport = httpx.ASGITransport(app=create_app(client))
            local = ApiOperator(
                "http://ripple.local", tokens[0] if tokens else None, transport=transport
            )
            async with local:
                return await action(local)

    try:
        return asyncio.run(go())
    except (OperatorError, RippleError) as exc:
        raise _fail(str(exc)) from None


def _print_json(value: Any) -> None:
    _out().print_json(json.dumps(value, default=str))


def _table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for i, column in enumerate(columns):
        # Ids and keys are copied into the next command: never wrap or truncate them.
        table.add_column(column, no_wrap=i == 0, overflow="fold")
    for row in rows:
        table.add_row(*["" if v is None else str(v) for v in row])
    _out().print(table)


def _short_time(value: str | None) -> str:
    return "" if not value else value.replace("T", " ")[:23]


def _duration(ms: float | None) -> str:
    if ms is None:
        return ""
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def _clock(value: str | None) -> str:
    """`2026-11-22T05:57:48.132122Z` -> `05:57:48.132`."""
    return "" if not value else value.split("T")[-1][:12]


def _error_text(error: Any) -> str:
    if not error:
        return ""
    if isinstance(error, dict):
        return f"{error.get('type', 'Error')}: {error.get('message', '')}"
    return str(error)


# -- processes --------------------------------------------------------------------------------


def _check_bind(host: str, settings: Settings) -> None:
    if settings.api_tokens:
        return
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        raise _fail(
            f"refusing to bind {host} without auth: set RIPPLE_API_TOKENS (comma-separated) "
            "or bind 127.0.0.1",
            2,
        )


@app.command()
def dev(
    app_path: Annotated[
        str | None, typer.Option("--app", help="Module with your workflows.")
    ] = None,
    host: Annotated[str, typer.Option(help="Interface for the API.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port for the API.")] = 8080,
    data_dir: Annotated[
        Path, typer.Option(help="Where the embedded Postgres and Redis keep their data.")
    ] = Path(".ripple"),
    concurrency: Annotated[int, typer.Option(min=1)] = 100,
) -> None:
    """All in one process: API + worker (+ embedded Postgres/Redis when no RIPPLE_DATABASE_URL)."""
    from ripple.platform.api.dev import run_dev
    from ripple.platform.errors import RippleError

    _check_bind(host, _settings())
    try:
        run_dev(app_path, host=host, port=port, data_dir=data_dir, concurrency=concurrency)
    except RippleError as exc:
        raise _fail(exc.message) from None


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    app_path: Annotated[
        str | None,
        typer.Option(
            "--app",
            help="Module with your workflows: starts by name validate input before writing.",
        ),
    ] = None,
) -> None:
    """Run the HTTP API (tokens from RIPPLE_API_TOKENS; none = loopback only, no auth)."""
    from ripple.platform.errors import RippleError
    from ripple.platform.logs import configure_logging

    settings = _settings()
    _check_bind(host, settings)
    configure_logging(console=settings.log_console, level=settings.log_level)

    from ripple.platform.api.server import Services, load_app, run_process, run_services
    from ripple.platform.client import Client

    if not settings.api_tokens:
        _err().print("[yellow]auth is off[/yellow]: no RIPPLE_API_TOKENS; serving on loopback only")

    def ready() -> None:
        _err().print(f"ripple API listening on http://{host}:{port} (OpenAPI at /openapi.json)")

    try:
        module = load_app(app_path) if app_path else None
        services = Services(api=(host, port), app=module, on_ready=ready)
        run_process(run_services(Client(settings=settings), services))
    except RippleError as exc:
        raise _fail(exc.message) from None


@app.command()
def worker(
    app_path: Annotated[str, typer.Option("--app", help="Module with your workflows.")],
    concurrency: Annotated[int, typer.Option(min=1, help="Runs executed at once.")] = 100,
    webhooks: Annotated[
        bool, typer.Option("--webhooks/--no-webhooks", help="Run the webhook dispatcher.")
    ] = True,
    sweeper: Annotated[
        bool, typer.Option("--sweeper/--no-sweeper", help="Run the retention sweeper.")
    ] = True,
    metrics_port: Annotated[
        int | None,
        typer.Option(help="Serve Prometheus /metrics on this port (no auth).", min=0),
    ] = None,
    metrics_host: Annotated[str, typer.Option(help="Interface of --metrics-port.")] = "127.0.0.1",
) -> None:
    """Run workflows of an app module (plus webhook dispatcher and sweeper) until SIGTERM."""
    import asyncio

    from ripple.platform.api.server import Services, load_app, run_services
    from ripple.platform.client import Client
    from ripple.platform.errors import RippleError
    from ripple.platform.logs import configure_logging

    settings = _settings()
    configure_logging(console=settings.log_console, level=settings.log_level)
    try:
        module = load_app(app_path)
        services = Services(
            app=module,
            worker=True,
            concurrency=concurrency,
            webhooks=webhooks,
            sweeper=sweeper,
            metrics=None if metrics_port is None else (metrics_host, metrics_port),
            on_ready=lambda: _err().print(
                f"ripple worker running {', '.join(w.name for w in module.workflows) or 'no'}"
                " workflows; Ctrl-C to stop"
            ),
        )
        asyncio.run(run_services(Client(settings=settings), services))
    except RippleError as exc:
        raise _fail(exc.message) from None


@app.command()
def migrate() -> None:
    """Apply pending database migrations (every process also does this when it connects)."""
    import asyncio

    from ripple.platform import migrate as migrations
    from ripple.platform.db import create_pool
    from ripple.platform.errors import RippleError
    from ripple.platform.logs import configure_logging

    settings = _settings()
    configure_logging(level="warning")

    async def go() -> int:
        pool = await create_pool(settings)
        try:
            return await migrations.migrate_database(settings, pool)
        finally:
            await pool.close()

    try:
        applied = asyncio.run(go())
    except RippleError as exc:
        raise _fail(exc.message) from None
    _out().print(f"applied {applied} migration(s); the schema is current")


# -- topics and subscriptions ----------------------------------------------------------------


@app.command()
def publish(
    topic: Annotated[str, typer.Argument(help="Topic, e.g. user.signup.")],
    payload: Annotated[
        str | None, typer.Argument(help="JSON payload; `-` reads stdin, `@file` a file.")
    ] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", "-k", help="Dedupe repeats.")
    ] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Publish an event and fan it out to matching subscriptions."""
    value = _json_arg(payload, "payload")
    result = _operate(api, token, lambda op: op.publish(topic, value, idempotency_key))
    if as_json:
        _print_json(result)
    else:
        resumed = result.get("waitsResolved") or 0
        note = f", {resumed} waiting run(s) resumed" if resumed else ""
        again = " (duplicate: already published)" if result.get("duplicate") else ""
        _out().print(
            f"event {result['eventId']} published to {topic}{again}: "
            f"{result['deliveries']} deliveries{note}"
        )


@app.command()
def explain(
    topic: Annotated[str, typer.Argument(help="Topic, e.g. user.signup.")],
    payload: Annotated[str | None, typer.Argument(help="JSON payload.")] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Dry run: which subscriptions and waiting runs an event would reach, and why not others."""
    value = _json_arg(payload, "payload")
    result = _operate(api, token, lambda op: op.explain(topic, value))
    if as_json:
        _print_json(result)
        return
    rows = [
        [
            v["subscriptionId"],
            v["pattern"],
            _target_text(v["target"]),
            v["status"],
            "yes" if v["matched"] else "no",
            v.get("reason") or "",
        ]
        for v in result.get("subscriptions", [])
    ]
    _table(f"{topic}", ["subscription", "pattern", "target", "status", "delivers", "why not"], rows)
    if result.get("waits") is not None:
        _out().print(f"waiting runs it would resume: {result['waits']}")


@app.command()
def signal(
    event: Annotated[str, typer.Argument(help="Event name the runs wait on.")],
    payload: Annotated[str | None, typer.Argument(help="JSON payload.")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", "-k", help="Retry-safe: dedupe repeats.")
    ] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Resume every run waiting on EVENT whose match the payload contains."""
    value = _json_arg(payload, "payload")
    result = _operate(api, token, lambda op: op.signal_matching(event, value, idempotency_key))
    if as_json:
        _print_json(result)
    else:
        _out().print(f"resumed {result['resumed']} run(s)")


@app.command()
def subscribe(
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
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Subscribe a queue, workflow or webhook to a topic pattern (exactly one target)."""
    targets = [t for t in (queue, workflow, webhook) if t is not None]
    if len(targets) != 1:
        raise _fail("give exactly one of --queue, --workflow, --webhook", 2)
    target: dict[str, Any]
    if queue is not None:
        target = {"type": "queue", "queue": queue}
    elif workflow is not None:
        target = {"type": "workflow", "workflow": workflow}
    else:
        target = {"type": "webhook", "url": webhook}
        if secret:
            target["secret"] = secret
    match = _json_arg(filter, "--filter")
    since = _time_arg(backfill_since, "--backfill-since")
    result = _operate(api, token, lambda op: op.subscribe(pattern, target, match, since))
    if as_json:
        _print_json(result)
    else:
        _out().print(f"subscription {result['id']}: {pattern} -> {_target_text(result['target'])}")
        if since is not None:
            _out().print(f"backfilled {result.get('backfillDelivered', 0)} event(s)")
        if result["target"].get("secret"):
            _out().print(f"webhook secret (shown once): {result['target']['secret']}")


def _target_text(target: dict[str, Any]) -> str:
    kind = target.get("type")
    where = target.get({"queue": "queue", "workflow": "workflow"}.get(str(kind), "url"))
    return f"{kind} {where}"


@app.command()
def unsubscribe(
    subscription_id: Annotated[str, typer.Argument(help="Subscription id.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
) -> None:
    """Delete a subscription."""
    if not _operate(api, token, lambda op: op.unsubscribe(subscription_id)):
        raise _fail(f"no subscription {subscription_id}")
    _out().print(f"subscription {subscription_id} deleted")


@app.command()
def pause(
    subscription_id: Annotated[str, typer.Argument(help="Subscription id.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Stop delivering events to a subscription until it is resumed (events still publish)."""
    _set_paused(subscription_id, True, api, token, as_json)


@app.command()
def resume(
    subscription_id: Annotated[str, typer.Argument(help="Subscription id.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Deliver to a paused (or disabled) subscription again, from the next event on."""
    _set_paused(subscription_id, False, api, token, as_json)


def _set_paused(
    subscription_id: str, paused: bool, api: str | None, token: str | None, as_json: bool
) -> None:
    result = _operate(api, token, lambda op: op.set_paused(subscription_id, paused))
    if as_json:
        _print_json(result)
    else:
        _out().print(f"subscription {subscription_id} is {result['status']}")


@subscriptions_app.callback(invoke_without_command=True)
def subscriptions(
    ctx: typer.Context, api: ApiOpt = None, token: TokenOpt = None, as_json: JsonOpt = False
) -> None:
    """List subscriptions (or replay events to one: `ripple subscriptions replay`)."""
    if ctx.invoked_subcommand is not None:
        return
    result = _operate(api, token, lambda op: op.subscriptions())
    if as_json:
        _print_json(result)
        return
    rows = [
        [
            s["id"],
            s["pattern"],
            _target_text(s["target"]),
            json.dumps(s.get("filter")),
            s.get("status"),
        ]
        for s in result
    ]
    _table("subscriptions", ["id", "pattern", "target", "filter", "status"], rows)


@subscriptions_app.command("replay")
def subscriptions_replay(
    subscription_id: Annotated[str, typer.Argument(help="Subscription id.")],
    since: Annotated[str, typer.Option("--since", help="ISO-8601: events created from then.")],
    until: Annotated[
        str | None, typer.Option("--until", help="ISO-8601: ...and before then (default now).")
    ] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-deliver the retained events of a time range to this subscription only."""
    start = _time_arg(since, "--since")
    assert start is not None
    end = _time_arg(until, "--until")
    count = _operate(api, token, lambda op: op.replay(subscription_id, start, end))
    if as_json:
        _print_json({"replayed": count})
    else:
        _out().print(f"replayed {count} event(s) to subscription {subscription_id}")


# -- runs -------------------------------------------------------------------------------------


WaitOpt = Annotated[
    float | None,
    typer.Option(
        "--wait",
        help="Wait up to this many seconds (at most 60) for the run to end; print its output.",
        min=0,
        max=60,
    ),
]


@runs_app.command("start")
def runs_start(
    workflow: Annotated[str, typer.Argument(help="Workflow name.")],
    input: Annotated[str | None, typer.Argument(help="JSON input.")] = None,
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key", "-k")] = None,
    priority: Annotated[
        int, typer.Option(min=0, help="Higher is claimed first among pending runs (0-1000).")
    ] = 0,
    wait: WaitOpt = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a run of WORKFLOW with a JSON input."""
    value = _json_arg(input, "input")
    result = _operate(
        api, token, lambda op: op.start(workflow, value, idempotency_key, priority, wait)
    )
    if as_json:
        _print_json(result)
    elif wait is None:
        _out().print(f"run {result['runId']} {result['status']}")
    elif result.get("timedOut"):
        raise _fail(f"run {result['runId']} is still {result['status']} after {wait:g}s")
    elif result["status"] == "completed":
        _out().print(f"run {result['runId']} completed: {json.dumps(result.get('output'))}")
    else:
        raise _fail(f"run {result['runId']} {result['status']}: {_error_text(result['error'])}")


@app.command("start")
def start(
    workflow: Annotated[str, typer.Argument(help="Workflow name.")],
    input: Annotated[str | None, typer.Argument(help="JSON input.")] = None,
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key", "-k")] = None,
    wait: WaitOpt = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a run of WORKFLOW (same as `ripple runs start`); `--wait 30` waits for its end."""
    runs_start(workflow, input, idempotency_key, 0, wait, api, token, as_json)


@runs_app.command("retry")
def runs_retry(
    run_id: Annotated[str, typer.Argument(help="Run id of a failed or canceled run.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Resume a failed or canceled run from its failed step (recorded steps keep results)."""
    result = _operate(api, token, lambda op: op.retry(run_id))
    if as_json:
        _print_json(result)
    else:
        _out().print(f"run {run_id} {result['status']} again")


@runs_app.command("fork")
def runs_fork(
    run_id: Annotated[str, typer.Argument(help="Run id to fork.")],
    from_step: Annotated[str, typer.Option("--from-step", help="Step key to run again from.")],
    input: Annotated[
        str | None, typer.Option("--input", help="New JSON input (default: the original's).")
    ] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a new run from RUN_ID's journal up to (not including) --from-step."""
    value = _json_arg(input, "--input")
    result = _operate(api, token, lambda op: op.fork(run_id, from_step, value))
    if as_json:
        _print_json(result)
    else:
        _out().print(f"run {result['runId']} forked from {run_id} at step {from_step}")


def _bulk(
    action: str,
    verb: str,
    flt: dict[str, Any],
    yes: bool,
    api: str | None,
    token: str | None,
    as_json: bool,
) -> None:
    if yes:
        count = _operate(api, token, lambda op: op.bulk(action, flt, False))
    else:
        matching = _operate(api, token, lambda op: op.bulk(action, flt, True))
        if matching == 0:
            _out().print("no run matches")
            return
        if not typer.confirm(f"{matching} run(s) match; {action} them?", err=True):
            raise _fail("aborted; nothing changed")
        count = _operate(api, token, lambda op: op.bulk(action, flt, False))
    if as_json:
        _print_json({"count": count})
    else:
        _out().print(f"{verb} {count} run(s)")


WorkflowOpt = Annotated[str | None, typer.Option("--workflow", "-w", help="Workflow name.")]
SinceOpt = Annotated[str | None, typer.Option("--since", help="Created at or after (ISO-8601).")]
UntilOpt = Annotated[str | None, typer.Option("--until", help="Created before (ISO-8601).")]
BeforeOpt = Annotated[
    str | None, typer.Option("--created-before", help="Created before (ISO-8601).")
]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")]


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
        "since": _time_arg(since, "--since"),
        "until": _time_arg(until, "--until"),
        "created_before": _time_arg(created_before, "--created-before"),
    }


@runs_app.command("cancel-many")
def runs_cancel_many(
    workflow: WorkflowOpt = None,
    status: Annotated[
        str | None, typer.Option("--status", help="pending, running, sleeping or waiting.")
    ] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    created_before: BeforeOpt = None,
    yes: YesOpt = False,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Cancel every active run matching the filters (shows the count and asks first)."""
    flt = _filter(workflow, status, since, until, created_before)
    _bulk("cancel", "canceled", flt, yes, api, token, as_json)


@runs_app.command("retry-many")
def runs_retry_many(
    workflow: WorkflowOpt = None,
    status: Annotated[str | None, typer.Option("--status", help="failed or canceled.")] = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    created_before: BeforeOpt = None,
    yes: YesOpt = False,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Retry every failed or canceled run matching the filters (shows the count and asks
    first)."""
    flt = _filter(workflow, status, since, until, created_before)
    _bulk("retry", "retried", flt, yes, api, token, as_json)


@runs_app.command("list")
def runs_list(
    workflow: Annotated[str | None, typer.Option(help="Only runs of this workflow.")] = None,
    status: Annotated[str | None, typer.Option(help="pending, running, sleeping, …")] = None,
    limit: Annotated[int, typer.Option(min=1, help="Page size.")] = 20,
    cursor: Annotated[str | None, typer.Option(help="`nextCursor` of the previous page.")] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List runs, newest first."""
    page = _operate(api, token, lambda op: op.list_runs(workflow, status, limit, cursor))
    if as_json:
        _print_json(page)
        return
    rows = [
        [
            r["runId"],
            r["workflow"],
            r["status"] + (f" ({r['blockedBy']})" if r.get("blockedBy") else ""),
            _short_time(r.get("createdAt"))[:19],
            _error_text(r.get("error")),
        ]
        for r in page["items"]
    ]
    _table("runs", ["run id", "workflow", "status", "created", "error"], rows)
    if page.get("nextCursor"):
        _out().print(f"more: --cursor {page['nextCursor']}")


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show a run and its step timeline (durations, attempts, errors)."""

    async def both(op: ApiOperator) -> tuple[Any, Any]:
        return await op.get_run(run_id), await op.steps(run_id)

    run, steps = _operate(api, token, both)
    if as_json:
        _print_json({**run, "steps": steps})
        return
    _out().print(
        f"[bold]run {run['runId']}[/bold]  {run['workflow']} v{run.get('version')}  "
        f"[bold]{run['status']}[/bold]"
        + (f"  blocked by {run['blockedBy']}" if run.get("blockedBy") else ""),
        highlight=False,
    )
    _out().print(
        f"created {_short_time(run.get('createdAt'))}  "
        f"completed {_short_time(run.get('completedAt')) or '-'}",
        highlight=False,
    )
    _out().print(f"input  {json.dumps(run.get('input'))}", highlight=False)
    if run.get("output") is not None:
        _out().print(f"output {json.dumps(run.get('output'))}", highlight=False)
    if run.get("error"):
        _out().print(f"[red]error  {_error_text(run['error'])}[/red]", highlight=False)
    rows = [
        [
            s["key"],
            s["kind"],
            s["status"],
            s.get("attempts"),
            _clock(s.get("startedAt")),
            _duration(s.get("durationMs")),
            _error_text(s.get("error")),
        ]
        for s in steps
    ]
    _table("steps", ["step", "kind", "status", "attempts", "started", "duration", "error"], rows)


@runs_app.command("cancel")
def runs_cancel(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
) -> None:
    """Cancel a run (and its children)."""
    if _operate(api, token, lambda op: op.cancel(run_id)):
        _out().print(f"run {run_id} canceled")
    else:
        _out().print(f"run {run_id} had already ended")


@runs_app.command("signal")
def runs_signal(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    name: Annotated[str, typer.Argument(help="Wait name.")],
    payload: Annotated[str | None, typer.Argument(help="JSON payload.")] = None,
    idempotency_key: Annotated[
        str | None, typer.Option("--idempotency-key", "-k", help="Retry-safe: dedupe repeats.")
    ] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Signal one run's wait NAME (buffered if the run is not waiting yet)."""
    value = _json_arg(payload, "payload")
    result = _operate(api, token, lambda op: op.signal(run_id, name, value, idempotency_key))
    if as_json:
        _print_json(result)
    else:
        _out().print("delivered" if result["delivered"] else "buffered until the run waits for it")


# -- queues -----------------------------------------------------------------------------------


@queues_app.command("send")
def queues_send(
    queue: Annotated[str, typer.Argument(help="Queue name.")],
    body: Annotated[str | None, typer.Argument(help="JSON body.")] = None,
    group_id: Annotated[str | None, typer.Option("--group-id", help="FIFO group.")] = None,
    delay: Annotated[float | None, typer.Option(help="Seconds before visible.")] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Send a message to QUEUE."""
    value = _json_arg(body, "body")
    result = _operate(api, token, lambda op: op.queue_send(queue, value, group_id, delay))
    if as_json:
        _print_json(result)
    else:
        _out().print(f"sent {result.get('id') or ''} to {queue}")


@queues_app.command("receive")
def queues_receive(
    queue: Annotated[str, typer.Argument(help="Queue name.")],
    max_messages: Annotated[int, typer.Option("--max", min=1, max=1000)] = 10,
    visibility_timeout: Annotated[float, typer.Option(help="Seconds invisible.")] = 30.0,
    wait: Annotated[float, typer.Option(help="Long-poll seconds.", max=20)] = 0.0,
    ack: Annotated[bool, typer.Option("--ack/--no-ack", help="Ack what was received.")] = False,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Receive messages from QUEUE (and ack them with --ack)."""
    messages = _operate(
        api,
        token,
        lambda op: op.queue_receive(queue, max_messages, visibility_timeout, wait, ack),
    )
    if as_json:
        _print_json(messages)
        return
    rows = [
        [m["id"], json.dumps(m.get("body")), m.get("receiveCount"), m["receipt"]] for m in messages
    ]
    _table(f"{queue}: {len(messages)} message(s)", ["id", "body", "receives", "receipt"], rows)


@queues_app.command("stats")
def queues_stats(
    queue: Annotated[str, typer.Argument(help="Queue name.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Depth, in-flight and dead-letter counts of QUEUE."""
    result = _operate(api, token, lambda op: op.queue_stats(queue))
    if as_json:
        _print_json(result)
        return
    _table(queue, ["stat", "value"], [[k, v] for k, v in result.items()])


@queues_app.command("dead-letters")
def queues_dead_letters(
    queue: Annotated[str, typer.Argument(help="Queue name.")],
    limit: Annotated[int, typer.Option(min=1)] = 50,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List the dead letters of QUEUE."""
    result = _operate(api, token, lambda op: op.queue_dead_letters(queue, limit))
    if as_json:
        _print_json(result)
        return
    rows = [[m.get("id"), json.dumps(m.get("body")), m.get("receiveCount")] for m in result]
    _table(f"{queue} dead letters", ["id", "body", "receives"], rows)


@queues_app.command("redrive")
def queues_redrive(
    queue: Annotated[str, typer.Argument(help="Queue name.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Move QUEUE's dead letters back onto it."""
    result = _operate(api, token, lambda op: op.queue_redrive(queue))
    if as_json:
        _print_json(result)
    else:
        _out().print(f"redrove {result['redriven']} message(s)")


# -- deliveries -------------------------------------------------------------------------------


@deliveries_app.command("list")
def deliveries_list(
    status: Annotated[str | None, typer.Option(help="pending, delivered, failed, …")] = None,
    limit: Annotated[int, typer.Option(min=1)] = 20,
    cursor: Annotated[str | None, typer.Option()] = None,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List webhook deliveries, newest first."""
    page = _operate(api, token, lambda op: op.deliveries(status, limit, cursor))
    if as_json:
        _print_json(page)
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
    _table("deliveries", ["id", "topic", "status", "attempts", "last code", "last error"], rows)


@deliveries_app.command("redrive")
def deliveries_redrive(
    delivery_id: Annotated[str | None, typer.Argument(help="Delivery id.")] = None,
    all_failed: Annotated[bool, typer.Option("--all-failed", help="Every failed one.")] = False,
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Deliver a failed delivery again (or every failed one with --all-failed)."""
    if (delivery_id is None) == (not all_failed):
        raise _fail("give a delivery id or --all-failed", 2)
    result = _operate(api, token, lambda op: op.delivery_redrive(delivery_id))
    if as_json:
        _print_json(result)
    else:
        _out().print(f"redrove {result['redriven']} delivery(ies)")


def main() -> None:
    """Console entry point."""
    app()


# -- schedules --------------------------------------------------------------------------------


@schedules_app.command("list")
def schedules_list(api: ApiOpt = None, token: TokenOpt = None, as_json: JsonOpt = False) -> None:
    """List schedules with their next tick."""
    result = _operate(api, token, lambda op: op.schedules())
    if as_json:
        _print_json(result)
        return
    rows = [
        [
            s["name"],
            f"workflow {s['workflow']}" if s.get("workflow") else f"topic {s['topic']}",
            s.get("cron") or f"every {s.get('everySeconds')}s",
            s.get("timezone"),
            "paused" if s.get("paused") else _short_time(s.get("nextRunAt"))[:19],
            s.get("source"),
        ]
        for s in result
    ]
    _table("schedules", ["name", "fires", "cadence", "timezone", "next", "source"], rows)


@schedules_app.command("create")
def schedules_create(
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    workflow: Annotated[str | None, typer.Option(help="Start runs of this workflow.")] = None,
    topic: Annotated[str | None, typer.Option(help="Or publish events to this topic.")] = None,
    cron: Annotated[str | None, typer.Option(help="Cron expression, e.g. '0 3 * * *'.")] = None,
    every: Annotated[float | None, typer.Option(help="Or seconds between ticks.")] = None,
    timezone: Annotated[str, typer.Option(help="IANA time zone of the cron.")] = "UTC",
    input: Annotated[str | None, typer.Option(help="JSON input (or event payload).")] = None,
    overlap: Annotated[str, typer.Option(help="skip | allow")] = "skip",
    api: ApiOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Create (or replace) a schedule."""
    body = {
        "name": name,
        "workflow": workflow,
        "topic": topic,
        "cron": cron,
        "every": every,
        "timezone": timezone,
        "input": _json_arg(input, "input"),
        "overlap": overlap,
    }
    result = _operate(api, token, lambda op: op.schedule_create(body))
    if as_json:
        _print_json(result)
    else:
        _out().print(f"schedule {result['name']} next at {result.get('nextRunAt')}")


def _schedule_action(name: str, action: str, api: str | None, token: str | None) -> Any:
    return _operate(api, token, lambda op: op.schedule_action(name, action))


@schedules_app.command("pause")
def schedules_pause(
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
) -> None:
    """Stop firing a schedule until it is resumed."""
    _schedule_action(name, "pause", api, token)
    _out().print(f"schedule {name} paused")


@schedules_app.command("resume")
def schedules_resume(
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
) -> None:
    """Fire a paused schedule again from its next tick on."""
    result = _schedule_action(name, "resume", api, token)
    _out().print(f"schedule {name} resumed, next at {result.get('nextRunAt')}")


@schedules_app.command("trigger")
def schedules_trigger(
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
) -> None:
    """Fire a schedule once now, outside its cadence."""
    result = _schedule_action(name, "trigger", api, token)
    _out().print(f"schedule {name} fired" + (f": run {result['runId']}" if result["runId"] else ""))


@schedules_app.command("delete")
def schedules_delete(
    name: Annotated[str, typer.Argument(help="Schedule name.")],
    api: ApiOpt = None,
    token: TokenOpt = None,
) -> None:
    """Delete a schedule."""
    if not _operate(api, token, lambda op: op.schedule_delete(name)):
        raise _fail(f"no schedule {name}")
    _out().print(f"schedule {name} deleted")
