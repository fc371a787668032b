"""Reading the audit trail (`client.audit.list`, `GET /v1/audit`, `ripple audit`, `/ui/audit`),
who the actor is over REST and the dashboard, and retention by the sweeper."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from ripple.platform.access import audit_store
from ripple.platform.access.actors import Actor, acting_as
from ripple.platform.api.app import create_app
from ripple.platform.cli.direct import ClientOperator
from ripple.platform.cli.remote import ApiOperator
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.db import transaction
from ripple.platform.errors import InvalidInput
from ripple.platform.ops.sweeper import Sweeper
from tests.helpers import csrf_of

TOKEN = "audit-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def _record(client: Client, action: str, target: str, **details: int) -> None:
    async with transaction(client.pool) as conn:
        await audit_store.record(conn, action, target, dict(details))


async def _backdate(client: Client, target: str, days: float) -> None:
    await client.pool.execute(
        "UPDATE ripple_audit SET at = now() - make_interval(secs => $2) WHERE target = $1",
        target,
        days * 86_400,
    )


async def test_audit_list__pages_newest_first_with_an_opaque_cursor(client: Client) -> None:
    with acting_as(Actor("ci", token_id="tok-1", request_id="req-1")):
        for n in range(5):
            await _record(client, "run.cancel", f"run-{n}", n=n)
    await _record(client, "schedule.pause", "nightly")

    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = await client.audit.list(action="run.cancel", limit=2, cursor=cursor)
        seen.extend(e.target or "" for e in page.items)
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [f"run-{n}" for n in (4, 3, 2, 1, 0)]
    assert pages == 3
    newest = (await client.audit.list(action="run.cancel", limit=1)).items[0]
    assert (newest.actor, newest.token_id, newest.request_id) == ("ci", "tok-1", "req-1")
    assert newest.details == {"n": 4}
    everything = await client.audit.list()
    assert [e.action for e in everything.items][:2] == ["schedule.pause", "run.cancel"]
    assert everything.next_cursor is None
    assert everything.items[0].actor == "python"


async def test_audit_list__since_filter_and_bad_arguments(client: Client) -> None:
    await _record(client, "run.retry", "old")
    await _record(client, "run.retry", "new")
    await _backdate(client, "old", 2)
    recent = await client.audit.list(since=datetime.now(UTC) - timedelta(days=1))
    assert [e.target for e in recent.items] == ["new"]
    naive = await client.audit.list(since=datetime.now(UTC).replace(tzinfo=None) - timedelta(3))
    assert [e.target for e in naive.items] == ["new", "old"]
    for bad in (
        {"limit": 0},
        {"limit": client.settings.max_page_size + 1},
        {"cursor": "not-a-cursor"},
        {"action": "run.explode"},
        {"since": "yesterday"},
    ):
        with pytest.raises(InvalidInput):
            await client.audit.list(**bad)


async def test_audit_retention__the_sweeper_deletes_entries_past_the_retention(
    client: Client,
) -> None:
    for target in ("ancient", "older", "recent"):
        await _record(client, "schedule.delete", target)
    await _backdate(client, "ancient", 400)
    await _backdate(client, "older", 366)
    await _backdate(client, "recent", 364)
    assert client.settings.audit_retention_days == 365
    (sweeper,) = [
        s
        for s in client.background_services(webhooks=False, sweeper=True)
        if isinstance(s, Sweeper)
    ]
    assert (await sweeper.sweep_once())["audit"] == 2
    assert [e.target for e in (await client.audit.list()).items] == ["recent"]

    shorter = client.settings.model_copy(update={"audit_retention_days": 1.0})
    assert (await Sweeper(client.pool, shorter, audit=client.audit).sweep_once())["audit"] == 1
    assert (await client.audit.list()).items == []
    # A sweeper without the port keeps audit entries.
    await _record(client, "schedule.delete", "kept")
    await _backdate(client, "kept", 900)
    assert (await Sweeper(client.pool, shorter).sweep_once())["audit"] == 0
    assert len((await client.audit.list()).items) == 1


@pytest.fixture
async def secured(settings: Settings) -> AsyncIterator[Client]:
    locked = settings.model_copy(update={"api_tokens": [TOKEN]})
    async with Client(settings=locked) as client:
        yield client


@pytest.fixture
async def api(secured: Client) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(secured), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://ripple") as http:
        yield http


async def test_audit_rest__an_api_token_acts_as_env_with_the_request_id(
    secured: Client, api: httpx.AsyncClient
) -> None:
    first = await secured.start("audit-rest", {})
    second = await secured.start("audit-rest", {"n": 2})
    canceled = await api.delete(f"/v1/runs/{first.run_id}", headers=AUTH | {"X-Request-Id": "r-42"})
    assert canceled.status_code == 200, canceled.text
    paused = await api.post(f"/v1/schedules/{'none'}/pause", headers=AUTH)
    assert paused.status_code == 404  # refused: no row
    signaled = await api.post(
        f"/v1/runs/{second.run_id}/signals/nudge", json={"x": 1}, headers=AUTH
    )
    assert signaled.status_code == 202, signaled.text
    await api.delete(f"/v1/runs/{second.run_id}", headers=AUTH)
    # The request's actor does not leak into the caller's context.
    await secured.schedules.create("after", topic="audit.after", every=3600)

    answer = await api.get("/v1/audit", headers=AUTH)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["nextCursor"] is None
    assert [(e["action"], e["actor"], e["target"]) for e in body["items"]] == [
        ("schedule.create", "python", "after"),
        ("run.cancel", "env", second.run_id),
        ("run.signal", "env", second.run_id),
        ("run.cancel", "env", first.run_id),
    ]
    oldest = body["items"][-1]
    assert oldest["requestId"] == "r-42"
    assert oldest["details"] == {"canceled": 1}
    assert oldest["tokenId"] is None
    assert datetime.fromisoformat(oldest["at"]).tzinfo is not None
    assert body["items"][1]["requestId"] not in (None, "r-42")  # one is made up per request


async def test_audit_rest__filters_pages_and_refusals(
    secured: Client, api: httpx.AsyncClient
) -> None:
    for n in range(3):
        await _record(secured, "run.fork", f"f{n}")
    await _record(secured, "run.retry", "r0")
    first = (await api.get("/v1/audit?action=run.fork&limit=2", headers=AUTH)).json()
    assert [e["target"] for e in first["items"]] == ["f2", "f1"]
    rest = await api.get(
        "/v1/audit", params={"action": "run.fork", "cursor": first["nextCursor"]}, headers=AUTH
    )
    assert [e["target"] for e in rest.json()["items"]] == ["f0"]
    since = (datetime.now(UTC) - timedelta(minutes=5)).isoformat()
    assert (
        len((await api.get("/v1/audit", params={"since": since}, headers=AUTH)).json()["items"])
        == 4
    )
    assert (await api.get("/v1/audit")).status_code == 401
    for bad in ({"action": "nope"}, {"limit": "0"}, {"cursor": "x"}, {"since": "yesterday"}):
        refused = await api.get("/v1/audit", params=bad, headers=AUTH)
        assert refused.status_code == 422, bad
        assert refused.headers["content-type"].startswith("application/problem+json")


async def test_audit_cli__direct_and_api_answer_the_same(
    secured: Client, api: httpx.AsyncClient
) -> None:
    await _record(secured, "subscription.pause", "s1")
    await _record(secured, "subscription.resume", "s1")
    direct = await ClientOperator(secured).audit(None, "subscription.pause", 10, None)
    async with ApiOperator("http://ripple", TOKEN) as remote:
        api.headers.update(AUTH)
        await remote._http.aclose()
        remote._http = api  # the in-process app stands for the server
        over_api = await remote.audit(
            datetime.now(UTC) - timedelta(hours=1), "subscription.pause", 10, None
        )
    assert direct == over_api
    assert [e["action"] for e in direct["items"]] == ["subscription.pause"]


async def test_audit_ui__page_lists_newest_first_and_filters_by_action(
    secured: Client, api: httpx.AsyncClient
) -> None:
    run = await secured.start("audit-ui", {})
    login = await api.post("/ui/login", data={"token": TOKEN, "next": "/ui/audit"})
    assert login.status_code == 303
    page = await api.get(f"/ui/runs/{run.run_id}")
    done = await api.post(f"/ui/runs/{run.run_id}/cancel", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303
    await _record(secured, "schedule.trigger", "nightly")

    listing = await api.get("/ui/audit")
    assert listing.status_code == 200
    rows = re.findall(r'<tr class="audit-entry">(.*?)</tr>', listing.text, re.S)
    assert len(rows) == 2
    assert "schedule.trigger" in rows[0]
    assert "run.cancel" in rows[1]
    assert "<td>env</td>" in rows[1]  # a dashboard session of a RIPPLE_API_TOKENS token
    assert run.run_id in rows[1]
    filtered = await api.get("/ui/audit", params={"action": "run.cancel"})
    rows = re.findall(r'<tr class="audit-entry">(.*?)</tr>', filtered.text, re.S)
    assert len(rows) == 1
    assert "run.cancel" in rows[0]
    assert '<option value="run.cancel" selected>' in filtered.text
