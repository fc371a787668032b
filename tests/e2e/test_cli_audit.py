"""End to end: `ripple audit` on the database and through the API, and who each path audits as."""

from __future__ import annotations

import json

import pytest

from tests.e2e.conftest import ApiServer, CliRunner

pytestmark = pytest.mark.timeout(300)


async def test_cli_audit__lists_actions_taken_directly_and_through_the_api(
    ripple_cli: CliRunner, api_server: ApiServer
) -> None:
    api = ["--api", api_server.url, "--token", api_server.token]
    await ripple_cli("schedules", "create", "cli-audit", "--topic", "cli.audit", "--every", "3600")
    await ripple_cli("schedules", "pause", "cli-audit", *api)

    direct = json.loads((await ripple_cli("audit", "--json")).stdout)
    mine = [e for e in direct["items"] if e["target"] == "cli-audit"]
    assert [(e["action"], e["actor"]) for e in mine] == [
        ("schedule.pause", "env"),
        ("schedule.create", "python"),
    ]
    assert mine[0]["requestId"]
    remote = json.loads(
        (await ripple_cli("audit", "--action", "schedule.pause", "--json", *api)).stdout
    )
    assert [e["target"] for e in remote["items"]] == ["cli-audit"]
    shown = await ripple_cli("audit", "--since", "1h", "--action", "schedule.create")
    assert "schedule.create" in shown.stdout
    assert "cli-audit" in shown.stdout
    bad = await ripple_cli("audit", "--since", "last week", check=False)
    assert bad.returncode == 2
    assert "--since" in bad.stderr
