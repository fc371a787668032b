"""`ripple` operator commands on the database call the `Client` in their own process: lean (no
HTTP stack, no server, no dashboard is imported) and still doing what the command needs."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.wake import queue_channel
from tests.helpers import assert_eventually

#: What no operator command on the database needs: the API app and the HTTP client that served
#: it in process, the webhook sender, the server, the dashboard.
NEVER = ("fastapi", "starlette", "httpx", "ripple.platform.api.app", "aiohttp", "uvicorn", "jinja2")


def _run(settings: Settings, *args: str) -> tuple[Any, list[str]]:
    """Run `ripple ARGS --json` in a subprocess on `settings`' database and Redis: its JSON
    output and which of NEVER and redis it imported."""
    code = (
        "import json, sys\n"
        "from ripple.platform.cli import app\n"
        "try:\n"
        f"    app({[*args, '--json']!r}, standalone_mode=False)\n"
        "finally:\n"
        f"    loaded = [m for m in {(*NEVER, 'redis')!r} if m in sys.modules]\n"
        "    print(json.dumps(loaded), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIPPLE_")}
    env |= {
        "RIPPLE_DATABASE_URL": str(settings.database_url),
        "RIPPLE_REDIS_URL": str(settings.redis_url),
        "RIPPLE_REDIS_PREFIX": settings.redis_prefix,
    }
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout), json.loads(done.stderr.splitlines()[-1])


async def test_cli_in_process__a_read_only_command_connects_no_redis(client: Client) -> None:
    handle = await client.start("cli-lean", {"n": 1})
    page, loaded = await asyncio.to_thread(_run, client.settings, "runs", "list")
    assert [r["runId"] for r in page["items"]] == [handle.run_id]
    # RIPPLE_REDIS_URL is set, but reading sends no hint: not even redis is imported.
    assert loaded == []


#: What `ripple runs list` has no use for: the logging and metrics libraries (nothing is logged
#: or counted), the schema validator, the engine, the parts of the client it does not call, and
#: the other command groups.
UNUSED_BY_RUNS_LIST = (
    "structlog",
    "prometheus_client",
    "jsonschema_rs",
    "ripple.workflows.runtime.worker",
    "ripple.platform.events.publish",
    "ripple.platform.access.tokens",
    "ripple.platform.schedules.schedules",
    "ripple.subscribers.webhooks.webhook",
    "ripple.platform.cli.queues",
    "ripple.platform.cli.processes",
)


async def test_cli_in_process__runs_list_loads_only_what_it_uses(client: Client) -> None:
    handle = await client.start("cli-lean", {"n": 1})
    # Through the console entry point, as `ripple runs list --json` runs.
    code = (
        "import json, sys\n"
        "sys.argv = ['ripple', 'runs', 'list', '--json']\n"
        "from ripple.platform.cli import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "finally:\n"
        f"    loaded = [m for m in {(*NEVER, *UNUSED_BY_RUNS_LIST)!r} if m in sys.modules]\n"
        "    print(json.dumps(loaded), file=sys.stderr)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIPPLE_")}
    env["RIPPLE_DATABASE_URL"] = str(client.settings.database_url)
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert [r["runId"] for r in json.loads(done.stdout)["items"]] == [handle.run_id]
    assert json.loads(done.stderr.splitlines()[-1]) == []


async def test_cli_in_process__a_write_still_wakes_other_processes(client: Client) -> None:
    async with client.waker.listen(queue_channel("cli-lean")) as listener:
        sent, loaded = await asyncio.to_thread(
            _run, client.settings, "queues", "send", "cli-lean", '{"n": 2}'
        )
        assert sent["id"]
        assert loaded == ["redis"]
        await assert_eventually(listener.take)
    [message] = await client.queues.receive("cli-lean", max_messages=5)
    assert message.body == {"n": 2}


async def test_cli_in_process__topics_asyncapi_prints_the_document(client: Client) -> None:
    await client.pool.execute(
        "INSERT INTO ripple_topic_schemas (topic, version, schema, fingerprint)"
        " VALUES ('cli.typed', 1, '{\"type\": \"object\"}'::jsonb, 'f1')"
    )
    doc, loaded = await asyncio.to_thread(_run, client.settings, "topics", "asyncapi")
    assert doc["asyncapi"] == "3.0.0"
    assert doc["channels"]["cli.typed"]["address"] == "cli.typed"
    assert loaded == []
