"""End to end: the `ripple` CLI as subprocesses, against the database and against the API."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from ripple.platform.client import Client
from tests.e2e.conftest import ApiServer, CliRunner, Process
from tests.helpers import assert_eventually

# Each command is a fresh Python process (~1-2 s of imports; much more on a loaded machine).
pytestmark = pytest.mark.timeout(300)


def parsed(text: str) -> Any:
    return json.loads(text)


async def test_cli__help_migrate_and_usage_errors(ripple_cli: CliRunner) -> None:
    helps, runs_help, migrated, bad_json, no_target, public = await asyncio.gather(
        ripple_cli("--help"),
        ripple_cli("runs", "show", "--help"),
        ripple_cli("migrate"),
        ripple_cli("publish", "a.b", "{not json", check=False),
        ripple_cli("subscribe", "a.*", check=False),
        ripple_cli("serve", "--host", "0.0.0.0", "--port", "1", check=False),
    )
    for command in ("dev", "serve", "worker", "migrate", "publish", "subscribe", "runs", "queues"):
        assert command in helps.stdout
    assert "step timeline" in runs_help.stdout
    assert "applied 0 migration(s)" in migrated.stdout
    assert bad_json.returncode == 2
    assert "not valid JSON" in bad_json.stderr
    assert no_target.returncode == 2
    assert "exactly one of --queue, --workflow, --webhook" in no_target.stderr
    # No RIPPLE_API_TOKENS: serve refuses a non-loopback interface.
    assert public.returncode == 2
    assert "RIPPLE_API_TOKENS" in public.stderr


async def test_cli__subscriptions_publish_and_queues(ripple_cli: CliRunner) -> None:
    sub = parsed(
        (await ripple_cli("subscribe", "audit.#", "--queue", "cli-audit", "--json")).stdout
    )
    assert sub["target"] == {"type": "queue", "queue": "cli-audit"}
    listed = parsed((await ripple_cli("subscriptions", "--json")).stdout)
    assert sub["id"] in [s["id"] for s in listed]

    published, sent = await asyncio.gather(
        ripple_cli("publish", "audit.login", '{"user": "ann"}', "-k", "login-1", "--json"),
        ripple_cli("queues", "send", "cli-audit", "-", "--json", stdin='{"manual": true}'),
    )
    event = parsed(published.stdout)
    assert event["deliveries"] == 1
    assert parsed(sent.stdout)["id"]
    repeat = await ripple_cli("publish", "audit.login", '{"user": "ann"}', "-k", "login-1")
    assert event["eventId"] in repeat.stdout
    assert "duplicate" in repeat.stdout

    paused = await ripple_cli("pause", sub["id"])
    assert "paused" in paused.stdout
    skipped = parsed((await ripple_cli("publish", "audit.skip", "{}", "--json")).stdout)
    assert skipped["deliveries"] == 0
    resumed = parsed((await ripple_cli("resume", sub["id"], "--json")).stdout)
    assert resumed["status"] == "active"

    stats_json, explained = await asyncio.gather(
        ripple_cli("queues", "stats", "cli-audit", "--json"),
        ripple_cli("explain", "audit.logout", "{}", "--json"),
    )
    stats = parsed(stats_json.stdout)
    (verdict,) = [
        v for v in parsed(explained.stdout)["subscriptions"] if v["subscriptionId"] == sub["id"]
    ]
    assert verdict["matched"] is True
    assert stats["visible"] == 2
    received = parsed(
        (
            await ripple_cli("queues", "receive", "cli-audit", "--max", "10", "--ack", "--json")
        ).stdout
    )
    assert sorted(json.dumps(m["body"], sort_keys=True) for m in received) == [
        '{"manual": true}',
        '{"user": "ann"}',
    ]
    table, dead, redrive, unsub = await asyncio.gather(
        ripple_cli("queues", "stats", "cli-audit"),
        ripple_cli("queues", "dead-letters", "cli-audit", "--json"),
        ripple_cli("queues", "redrive", "cli-audit"),
        ripple_cli("unsubscribe", sub["id"]),
    )
    assert "visible" in table.stdout
    assert parsed(dead.stdout) == []
    assert "redrove 0" in redrive.stdout
    assert "deleted" in unsub.stdout
    gone = await ripple_cli("unsubscribe", sub["id"], check=False)
    assert gone.returncode == 1
    assert "no subscription" in gone.stderr


async def _status(database_url: str, run_id: str) -> str:
    """The run's status, read in this process (polling through the CLI would be slow)."""
    async with Client(database_url=database_url) as client:
        run = await client.get_run(run_id)
        assert run is not None
        return str(run.status)


async def test_cli__runs_start_show_signal_cancel(
    ripple_cli: CliRunner, worker_process: Process, module_database_url: str
) -> None:
    started = parsed(
        (await ripple_cli("runs", "start", "onboard-user", '{"userId": 501}', "--json")).stdout
    )
    run_id = started["runId"]

    async def status_is(expected: str) -> bool:
        return await _status(module_database_url, run_id) == expected

    await assert_eventually(lambda: status_is("waiting"), timeout=60, interval=0.1)
    resumed = await ripple_cli("signal", "user.verified", '{"userId": 501}')
    assert "resumed 1 run(s)" in resumed.stdout
    await assert_eventually(lambda: status_is("completed"), timeout=60, interval=0.1)

    run = parsed((await ripple_cli("runs", "show", run_id, "--json")).stdout)
    assert run["output"]["verified"] is True
    assert [s["key"] for s in run["steps"]] == [
        "create-account",
        "send-welcome",
        "welcome-delay",
        "verified",
        "send-tips",
    ]
    timeline = (await ripple_cli("runs", "show", run_id)).stdout
    for text in (run_id, "completed", "welcome-delay", "sleep", "ms"):
        assert text in timeline

    other = parsed(
        (await ripple_cli("runs", "start", "onboard-user", '{"userId": 502}', "--json")).stdout
    )["runId"]
    signaled, listed = await asyncio.gather(
        ripple_cli("runs", "signal", other, "verified", '{"userId": 502}', "--json"),
        ripple_cli("runs", "list", "--workflow", "onboard-user", "--json"),
    )
    outcome = parsed(signaled.stdout)
    assert outcome["delivered"] or outcome["buffered"]
    assert {run_id, other} <= {r["runId"] for r in parsed(listed.stdout)["items"]}
    canceled = await ripple_cli("runs", "cancel", other)
    assert "canceled" in canceled.stdout or "already ended" in canceled.stdout
    missing = await ripple_cli("runs", "show", "01a201d4-ac99-7df3-a000-000000000000", check=False)
    assert missing.returncode == 1
    assert "no run" in missing.stderr


async def test_cli__operator_commands_through_the_api(
    ripple_cli: CliRunner, api_server: ApiServer
) -> None:
    api = ["--api", api_server.url, "--token", api_server.token]
    published, runs, subs, deliveries = await asyncio.gather(
        ripple_cli("publish", "api.ping", '{"n": 1}', *api, "--json"),
        ripple_cli("runs", "list", *api, "--json"),
        ripple_cli("subscriptions", *api, "--json"),
        ripple_cli("deliveries", "list", *api, "--json"),
    )
    assert parsed(published.stdout)["deliveries"] == 0
    assert "items" in parsed(runs.stdout)
    assert isinstance(parsed(subs.stdout), list)
    assert parsed(deliveries.stdout)["items"] == []
    hooked = parsed(
        (await ripple_cli("subscribe", "api.#", "--queue", "api-q", *api, "--json")).stdout
    )
    paused = parsed((await ripple_cli("pause", hooked["id"], *api, "--json")).stdout)
    assert paused["status"] == "paused"
    resumed = await ripple_cli("resume", hooked["id"], *api)
    assert "active" in resumed.stdout
    redrive, denied = await asyncio.gather(
        ripple_cli("deliveries", "redrive", "--all-failed", *api),
        ripple_cli("runs", "list", "--api", api_server.url, "--token", "nope", check=False),
    )
    assert "redrove 0" in redrive.stdout
    assert denied.returncode == 1
    assert "401" in denied.stderr


async def test_cli__deletes_through_the_api_tell_a_missing_one_apart(
    ripple_cli: CliRunner, api_server: ApiServer
) -> None:
    api = ["--api", api_server.url, "--token", api_server.token]
    sub = parsed(
        (await ripple_cli("subscribe", "gone.#", "--queue", "gone-q", *api, "--json")).stdout
    )
    await ripple_cli("schedules", "create", "api-tick", "--topic", "api.tick", "--every", "3600")
    assert "deleted" in (await ripple_cli("unsubscribe", sub["id"], *api)).stdout
    assert "deleted" in (await ripple_cli("schedules", "delete", "api-tick", *api)).stdout
    sub_gone, schedule_gone = await asyncio.gather(
        ripple_cli("unsubscribe", sub["id"], *api, check=False),
        ripple_cli("schedules", "delete", "api-tick", *api, check=False),
    )
    assert sub_gone.returncode == schedule_gone.returncode == 1
    assert "no subscription" in sub_gone.stderr
    assert "no schedule api-tick" in schedule_gone.stderr


async def test_cli__schedules(ripple_cli: CliRunner) -> None:
    bad = await ripple_cli(
        "schedules", "create", "cli-bad", "--workflow", "report", "--cron", "nope", check=False
    )
    assert bad.returncode == 1
    assert "cron" in bad.stderr
    created = parsed(
        (
            await ripple_cli(
                "schedules",
                "create",
                "cli-tick",
                "--topic",
                "cli.tick",
                "--every",
                "3600",
                "--input",
                '{"n": 1}',
                "--json",
            )
        ).stdout
    )
    assert created["topic"] == "cli.tick"
    assert created["everySeconds"] == 3600
    listed = parsed((await ripple_cli("schedules", "list", "--json")).stdout)
    assert "cli-tick" in [s["name"] for s in listed]
    assert "paused" in (await ripple_cli("schedules", "pause", "cli-tick")).stdout
    assert "resumed" in (await ripple_cli("schedules", "resume", "cli-tick")).stdout
    assert "fired" in (await ripple_cli("schedules", "trigger", "cli-tick")).stdout
    assert "deleted" in (await ripple_cli("schedules", "delete", "cli-tick")).stdout
    gone = await ripple_cli("schedules", "delete", "cli-tick", check=False)
    assert gone.returncode == 1


async def test_cli_signals_take_an_idempotency_key(
    ripple_cli: CliRunner, api_server: ApiServer, module_database_url: str
) -> None:
    api = ["--api", api_server.url, "--token", api_server.token]
    run_id = parsed((await ripple_cli("runs", "start", "cli-unserved", "{}", "--json")).stdout)[
        "runId"
    ]
    answers = [
        await ripple_cli("runs", "signal", run_id, "go", '{"n": 1}', "-k", "once", *extra)
        for extra in ([], api, [])
    ]
    assert all("buffered" in a.stdout for a in answers)
    matching = [
        parsed((await ripple_cli("signal", "cli.nobody", "{}", "-k", "m", *extra)).stdout)
        for extra in (["--json"], [*api, "--json"])
    ]
    assert matching == [{"resumed": 0}, {"resumed": 0}]
    async with Client(database_url=module_database_url) as client:
        signals = await client.pool.fetchval(
            "SELECT count(*) FROM ripple_signals WHERE run_id = $1", run_id
        )
        keys = await client.pool.fetchval("SELECT count(*) FROM ripple_signal_keys")
    assert (signals, keys) == (1, 2)


async def test_cli__operating_runs_bulk_fork_replay_and_start_wait(
    ripple_cli: CliRunner, worker_process: Process, api_server: ApiServer
) -> None:
    api = ["--api", api_server.url, "--token", api_server.token]
    since = _now_iso()
    waited = await ripple_cli("start", "onboard-user", '{"userId": 701}', "--wait", "0.5", "--json")
    run = parsed(waited.stdout)
    assert run["timedOut"] is True
    assert run["status"] in ("pending", "running", "sleeping", "waiting")
    not_yet = await ripple_cli("runs", "retry", run["runId"], check=False)
    assert not_yet.returncode == 1
    assert "only failed or canceled runs can be retried" in not_yet.stderr

    declined = await ripple_cli(
        "runs",
        "cancel-many",
        "--workflow",
        "onboard-user",
        "--since",
        since,
        stdin="n\n",
        check=False,
    )
    assert declined.returncode == 1
    assert "1 run(s) match" in declined.stderr
    assert "nothing changed" in declined.stderr
    canceled = await ripple_cli(
        "runs", "cancel-many", "--workflow", "onboard-user", "--since", since, "--yes"
    )
    assert "canceled 1 run(s)" in canceled.stdout
    retried = await ripple_cli(
        "runs", "retry-many", "--status", "canceled", "--since", since, "--yes", *api
    )
    assert "retried 1 run(s)" in retried.stdout
    nothing = await ripple_cli("runs", "retry-many", "--workflow", "nope", "--since", since)
    assert "no run matches" in nothing.stdout

    forked = parsed(
        (
            await ripple_cli(
                "runs", "fork", run["runId"], "--from-step", "send-welcome", "--json", *api
            )
        ).stdout
    )
    assert forked["forkedFrom"] == run["runId"]
    bad_step = await ripple_cli("runs", "fork", run["runId"], "--from-step", "nope", check=False)
    assert "not in the journal" in bad_step.stderr

    sub = parsed(
        (
            await ripple_cli(
                "subscribe", "ops.#", "--queue", "ops-q", "--backfill-since", since, "--json"
            )
        ).stdout
    )
    await ripple_cli("publish", "ops.one", "{}")
    replayed = await ripple_cli("subscriptions", "replay", sub["id"], "--since", since, *api)
    assert "replayed 1 event(s)" in replayed.stdout


def _now_iso() -> str:
    from datetime import UTC, datetime, timedelta

    return (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
