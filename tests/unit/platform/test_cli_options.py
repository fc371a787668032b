"""The CLI's shared pieces: `operator_command` options; and an app of some route modules (no
I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import typer
from typer.testing import CliRunner

from ripple.platform.api.app import V1_ROUTES, create_app
from ripple.platform.cli.options import Remote, duration_arg, operator_command, since_arg
from ripple.platform.core.config import load_settings

SETTINGS = load_settings(database_url="postgresql://unused@127.0.0.1:1/none")


def _app(json_output: bool) -> tuple[typer.Typer, list[tuple[Remote, str, int]]]:
    app = typer.Typer(rich_markup_mode=None)
    calls: list[tuple[Remote, str, int]] = []

    @app.callback()
    def root() -> None:
        """Two commands need a group."""

    @operator_command(app.command("go"), json_output=json_output)
    def go(remote: Remote, name: str, count: int = 1) -> None:
        """Record the call."""
        calls.append((remote, name, count))

    return app, calls


def test_cli_options__operator_command_adds_api_token_and_json_after_its_own() -> None:
    app, calls = _app(json_output=True)
    done = CliRunner().invoke(
        app, ["go", "ann", "--count", "3", "--api", "http://x:1", "--token", "t", "--json"]
    )
    assert done.exit_code == 0, done.output
    assert calls == [(Remote("http://x:1", "t", True), "ann", 3)]
    helped = CliRunner().invoke(app, ["go", "--help"], terminal_width=200)
    options = [line.split()[0] for line in helped.output.splitlines() if line.startswith("  --")]
    assert options == ["--count", "--api", "--token", "--json", "--help"]


def test_cli_options__without_json_output_there_is_no_json_option() -> None:
    app, calls = _app(json_output=False)
    assert CliRunner().invoke(app, ["go", "ann"]).exit_code == 0
    assert calls == [(Remote(None, None, False), "ann", 1)]
    refused = CliRunner().invoke(app, ["go", "ann", "--json"])
    assert refused.exit_code == 2
    assert "No such option" in refused.output


def test_cli_options__api_and_token_come_from_the_environment() -> None:
    app, calls = _app(json_output=True)
    env = {"RIPPLE_API_URL": "http://env:2", "RIPPLE_API_TOKEN": "secret"}
    assert CliRunner().invoke(app, ["go", "bob"], env=env).exit_code == 0
    assert calls == [(Remote("http://env:2", "secret", False), "bob", 1)]


def test_cli_options__an_app_with_some_route_modules_serves_only_their_paths() -> None:
    full = set(create_app(SETTINGS).openapi()["paths"])
    queues = set(create_app(SETTINGS, routes=["queues"]).openapi()["paths"])
    assert queues == {p for p in full if p.startswith("/v1/queues/")}
    both = set(create_app(SETTINGS, routes=["runs", "recovery"]).openapi()["paths"])
    assert "/v1/runs/{run_id}/retry" in both
    assert "/v1/workflows/{name}/runs" in both
    assert not both & {"/healthz", "/metrics", "/v1/signals"}
    # Every /v1 path of the full app belongs to one of the route modules.
    every = set(create_app(SETTINGS, routes=V1_ROUTES).openapi()["paths"])
    assert every == {p for p in full if p.startswith("/v1/")}


def test_cli_options__an_unknown_route_module_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown route modules"):
        create_app(SETTINGS, routes=["runs", "nope"])


def test_cli_options__durations_and_since_take_units_plain_seconds_or_a_time() -> None:
    assert duration_arg("90d", "--expires-in") == timedelta(days=90)
    assert duration_arg(" 2w ", "--since") == timedelta(weeks=2)
    assert duration_arg("1.5h", "--since") == timedelta(minutes=90)
    assert duration_arg("45", "--since") == timedelta(seconds=45)
    for bad in ("0d", "-1h", "7x", "", "d"):
        with pytest.raises(typer.Exit) as exited:
            duration_arg(bad, "--expires-in")
        assert exited.value.exit_code == 2
    ago = since_arg("12h", "--since")
    assert ago is not None
    assert abs(datetime.now(UTC) - timedelta(hours=12) - ago) < timedelta(minutes=1)
    assert since_arg("2026-01-31T12:00:00", "--since") == datetime(2026, 1, 31, 12, tzinfo=UTC)
    assert since_arg(None, "--since") is None
    with pytest.raises(typer.Exit):
        since_arg("yesterday", "--since")
