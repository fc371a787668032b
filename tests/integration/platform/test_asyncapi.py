"""`GET /asyncapi.json` parsed by the official `@asyncapi/parser` (npm) with zero errors, on
schemas written straight into the registry's tables (as the registry API would)."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field

from ripple.platform.cli.direct import ClientOperator
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.subscribers import QueueTarget, WebhookTarget, WorkflowTarget
from tests.helpers import rest_client

PARSE_JS = """
const { Parser } = require('@asyncapi/parser');
const fs = require('fs');
(async () => {
  const text = fs.readFileSync(process.argv[2], 'utf8');
  const { document, diagnostics } = await new Parser().parse(text);
  const out = diagnostics.map(d => ({ code: d.code, message: d.message, severity: d.severity,
                                      path: d.path }));
  console.log(JSON.stringify({ parsed: document !== undefined, diagnostics: out }));
})().catch(e => { console.error(e); process.exit(2); });
"""
#: `@asyncapi/parser`'s (Spectral's) severity of an error.
ERROR = 0


@pytest.fixture(scope="session")
def asyncapi_parser(request: pytest.FixtureRequest) -> Path:
    """A folder with `@asyncapi/parser` installed by npm, kept in pytest's cache across
    sessions and shared by xdist workers (the first one installs it under a lock)."""
    npm = shutil.which("npm")
    assert npm is not None, "npm (Node.js 20) is needed to run the official AsyncAPI parser"
    folder = request.config.cache.mkdir("asyncapi-parser-3")
    installed = folder / "installed"
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not installed.exists():
            subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", "--silent", "@asyncapi/parser@3"],
                cwd=folder,
                check=True,
                timeout=600,
                capture_output=True,
            )
            installed.touch()
        (folder / "parse.js").write_text(PARSE_JS)
    return folder


def _parse(folder: Path, doc: dict[str, Any]) -> dict[str, Any]:
    path = folder / f"doc-{os.getpid()}.json"  # xdist workers share the folder
    path.write_text(json.dumps(doc))
    done = subprocess.run(
        ["node", "parse.js", str(path)],
        cwd=folder,
        check=True,
        timeout=120,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


class Address(BaseModel):
    city: str
    zip: str | None = None


class Signup(BaseModel):
    userId: int = Field(ge=1)
    email: str
    plan: str = "free"
    address: Address | None = None
    tags: list[str] = []


SCHEMAS = [
    ("user.signup", 1, {"type": "object", "properties": {"userId": {"type": "integer"}}}),
    ("user.signup", 2, Signup.model_json_schema()),
    (
        "order.paid",
        1,
        {
            "type": "object",
            "required": ["amount"],
            "properties": {"amount": {"type": "number", "minimum": 0}},
        },
    ),
]


async def _register(client: Client) -> None:
    for topic, version, schema in SCHEMAS:
        await client.pool.execute(
            "INSERT INTO ripple_topic_schemas (topic, version, schema, fingerprint)"
            " VALUES ($1, $2, $3, $4)",
            topic,
            version,
            {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema},
            f"{topic}-{version}",
        )
    await client.pool.execute(
        "INSERT INTO ripple_topic_contracts (topic, compatibility) VALUES ('order.paid', 'full')"
    )


@pytest.mark.timeout(180)
async def test_asyncapi__served_document_parses_with_zero_errors(
    settings: Settings, asyncapi_parser: Path
) -> None:
    local = settings.model_copy(update={"webhook_allowed_networks": ["127.0.0.0/8"]})
    async with Client(settings=local) as client, rest_client(client) as http:
        doc, text = await _served(client, http)
        # `ripple topics asyncapi` prints the same document (without the request's server).
        printed = await ClientOperator(client).asyncapi()
    assert printed == {k: v for k, v in doc.items() if k != "servers"}
    assert "s3cret" not in text
    assert "whsec_" not in text
    result = _parse(asyncapi_parser, doc)
    errors = [d for d in result["diagnostics"] if d["severity"] == ERROR]
    assert result["parsed"], result
    assert errors == []


async def _served(client: Client, http: httpx.AsyncClient) -> tuple[dict[str, Any], str]:
    await _register(client)
    await client.subscribe("user.*", QueueTarget("users"))
    await client.subscribe("#", WorkflowTarget("audit"))
    await client.subscribe(
        "order.paid", WebhookTarget("http://127.0.0.1:9/hook?token=s3cret", format="cloudevents")
    )
    answer = await http.get("/asyncapi.json")
    assert answer.status_code == 200
    doc = answer.json()

    assert doc["asyncapi"] == "3.0.0"
    assert {c["address"] for c in doc["channels"].values()} == {"user.signup", "order.paid"}
    signup = doc["components"]["messages"]["user.signup"]["payload"]
    assert set(signup["properties"]) == {"userId", "email", "plan", "address", "tags"}
    assert "user.signup.Address" in doc["components"]["schemas"]
    operations = doc["operations"]
    assert {k for k, op in operations.items() if op["action"] == "send"} == {
        "user.signup.publish",
        "user.signup.cloudevents",
        "order.paid.publish",
        "order.paid.cloudevents",
    }
    assert {k for k, op in operations.items() if op["action"] == "receive"} == {
        "user.signup.receive.queue",
        "user.signup.receive.workflow",
        "order.paid.receive.webhook",
        "order.paid.receive.workflow",
    }
    return doc, answer.text
