"""`ripple topics schema register|check|show`: on the database and over `--api`, same answers."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from ripple.platform.cli.direct import ClientOperator
from ripple.platform.cli.remote import ApiOperator
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from tests.helpers import rest_client

V1 = {
    "type": "object",
    "properties": {"userId": {"type": "integer"}, "email": {"type": "string"}},
    "required": ["userId", "email"],
    "additionalProperties": False,
}
BREAKING = {**V1, "properties": {**V1["properties"], "plan": {"type": "string"}}}  # type: ignore[dict-item]
BREAKING["required"] = ["userId", "email", "plan"]


def _ripple(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RIPPLE_")}
    env |= {"RIPPLE_DATABASE_URL": str(settings.database_url), "COLUMNS": "200"}
    argv = ["ripple", *args]
    code = f"import sys; sys.argv = {argv!r}\nfrom ripple.platform.cli import main\nmain()"
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )


async def test_cli_topic_schemas__register_check_show_on_the_database(
    client: Client, tmp_path: Path
) -> None:
    v1, breaking = tmp_path / "v1.json", tmp_path / "breaking.json"
    v1.write_text(json.dumps(V1))
    breaking.write_text(json.dumps(BREAKING))
    run = lambda *args: asyncio.to_thread(_ripple, client.settings, *args)  # noqa: E731

    done = await run("topics", "schema", "register", "user.signup", str(v1), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["version"] == 1
    done = await run("topics", "schema", "check", "user.signup", str(breaking))
    assert done.returncode == 1
    assert "/plan: the new schema requires this property" in done.stdout
    done = await run("topics", "schema", "register", "user.signup", str(breaking))
    assert done.returncode == 1
    assert "/plan" in done.stderr
    done = await run("topics", "schema", "show", "user.signup", "--json")
    assert done.returncode == 0
    assert json.loads(done.stdout)["schema"] == V1
    assert [v.version for v in await client.topics.list_schemas("user.signup")] == [1]


async def test_cli_topic_schemas__api_operator_answers_as_the_direct_one(client: Client) -> None:
    direct = ClientOperator(client)
    async with ApiOperator("http://test", None) as api, rest_client(client) as http:
        await api._http.aclose()
        api._http = http
        first: Any = await api.register_schema("api.topic", V1, None)
        assert first == {
            "topic": "api.topic",
            "version": 1,
            "compatibility": "backward",
            "created": None,
        }
        assert (await direct.register_schema("api.topic", V1, None))["created"] is False
        assert await api.check_schema("api.topic", BREAKING) == await direct.check_schema(
            "api.topic", BREAKING
        )
        assert await api.get_schema("api.topic", 1) == await direct.get_schema("api.topic", 1)
        assert await api.get_schema("api.topic", 5) is None
