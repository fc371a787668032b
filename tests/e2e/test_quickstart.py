"""The README quick start, followed literally: `ripple dev` on embedded Postgres and Redis.

Runs in a fresh directory with no RIPPLE_* settings, like a new clone (`make run` is
`ripple dev --app examples.onboarding`; a free port replaces 8080 so parallel runs don't clash),
then the README's second-terminal commands from that directory, then Ctrl-C.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import CliRunner, Process, base_env, free_port
from tests.helpers import assert_eventually

pytestmark = pytest.mark.timeout(300)

SIGNUP = '{"userId": 42, "email": "ann@example.com"}'


async def test_quickstart__readme_walkthrough_completes_a_run(
    ripple_cli: CliRunner, tmp_path: Path
) -> None:
    env = base_env()  # no RIPPLE_DATABASE_URL: embedded Postgres and Redis under .ripple/
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    dev = Process(
        ["dev", "--app", "examples.onboarding", "--port", str(port)],
        env,
        tmp_path,
        tmp_path / "dev.log",
    )
    try:
        dev.wait_output("ripple dev is running", timeout=180)
        banner = dev.text()
        assert "ripple publish user.signup" in banner
        assert f"curl -s -X POST {url}/v1/topics/user.signup/events" in banner
        assert (tmp_path / ".ripple" / "dev.json").exists()

        # Second terminal, same directory: the CLI finds the dev stack through .ripple/dev.json.
        published = await ripple_cli("publish", "user.signup", SIGNUP, env=env, cwd=tmp_path)
        assert "published to user.signup: 1 deliveries" in published.stdout
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            curl = await http.post(
                "/v1/topics/user.signup/events",
                headers={"content-type": "application/json"},
                content='{"payload": ' + SIGNUP + "}",
            )
            assert curl.status_code == 202
            assert curl.json()["deliveries"] == 1

            listed = await ripple_cli("runs", "list", "--json", env=env, cwd=tmp_path)
            runs = [r["runId"] for r in json.loads(listed.stdout)["items"]]
            assert len(runs) == 2

            async def all_waiting() -> bool:
                statuses = [(await http.get(f"/v1/runs/{r}")).json()["status"] for r in runs]
                return statuses == ["waiting", "waiting"]

            # "After about 3 seconds its status is `waiting`."
            await assert_eventually(all_waiting, timeout=60, interval=0.2)

        verified = await ripple_cli(
            "publish", "user.verified", '{"userId": 42}', env=env, cwd=tmp_path
        )
        assert "2 waiting run(s) resumed" in verified.stdout

        async def completed() -> str | None:
            shown = await ripple_cli("runs", "show", runs[0], env=env, cwd=tmp_path)
            return shown.stdout if "completed" in shown.stdout.splitlines()[0] else None

        timeline = await assert_eventually(completed, timeout=60, interval=0.5)
        assert timeline is not None
        for step in ("create-account", "send-welcome", "welcome-delay", "verified", "send-tips"):
            assert step in timeline
    finally:
        code = dev.stop(signal.SIGINT, timeout=60)  # Ctrl-C
    assert code == 0, dev.text()[-3000:]
    assert "ripple dev stopped" in dev.text()
    assert not (tmp_path / ".ripple" / "dev.json").exists()
