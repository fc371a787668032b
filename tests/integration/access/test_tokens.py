"""Stored API tokens: create, list, revoke, scopes on every REST route kind, expiry, rate
limits, audit rows, and the lookup cache that refuses a revoked token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import asyncpg
import httpx
import pytest

from ripple.platform.access.tokens import SECRET_PREFIX
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.errors import InvalidInput, RippleError
from ripple.subscribers import QueueTarget, RateLimit
from tests.helpers import assert_eventually, csrf_of, rest_client

ENV_TOKEN = "env-admin-token-for-tests"


@pytest.fixture
async def secured(settings: Settings) -> AsyncIterator[Client]:
    """A client whose API requires tokens (RIPPLE_API_TOKENS set)."""
    async with Client(settings=settings.model_copy(update={"api_tokens": [ENV_TOKEN]})) as c:
        yield c


@pytest.fixture
async def api(secured: Client) -> AsyncIterator[httpx.AsyncClient]:
    async with rest_client(secured) as http:
        yield http


def bearer(secret: str) -> dict[str, str]:
    return {"authorization": f"Bearer {secret}"}


async def _audit(client: Client, action: str) -> list[asyncpg.Record]:
    async with client.pool.acquire() as conn:
        return list(
            await conn.fetch(
                "SELECT actor, token_id, target, request_id, details FROM ripple_audit "
                "WHERE action = $1 ORDER BY id",
                action,
            )
        )


async def test_create_list_revoke_with_audit_rows(secured: Client) -> None:
    token = await secured.tokens.create("ci", scopes=["publish:order.*", "read"])
    assert token.secret is not None
    assert token.secret.startswith(SECRET_PREFIX)
    assert len(token.secret) - len(SECRET_PREFIX) >= 43  # 32 bytes, URL-safe base64
    assert token.scopes == ["publish:order.*", "read"]
    assert token.expires_at is None
    listed = await secured.tokens.list()
    assert [(t.id, t.secret) for t in listed] == [(token.id, None)]
    assert await secured.tokens.revoke(token.id) is True
    assert await secured.tokens.revoke(token.id) is False
    assert await secured.tokens.revoke("no-such-id") is False
    (created,) = await _audit(secured, "token.create")
    assert created["target"] == token.id
    assert created["actor"] == "python"
    assert created["details"]["scopes"] == ["publish:order.*", "read"]
    (revoked,) = await _audit(secured, "token.revoke")
    assert revoked["target"] == token.id


async def test_bad_scopes_are_refused_and_nothing_is_written(secured: Client) -> None:
    for scopes in ([], ["root"], ["publish:Order.*"], ["queue:a b"]):
        with pytest.raises(InvalidInput):
            await secured.tokens.create("bad", scopes=scopes)
    assert await secured.tokens.list() == []
    assert await _audit(secured, "token.create") == []


async def test_rest_create_list_revoke(api: httpx.AsyncClient) -> None:
    admin = bearer(ENV_TOKEN)
    created = await api.post(
        "/v1/tokens",
        json={
            "name": "pub",
            "scopes": ["publish:order.*"],
            "expiresIn": 3600,
            "rateLimit": {"limit": 5, "perSeconds": 1},
        },
        headers=admin,
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert set(body) >= {"id", "name", "scopes", "secret", "createdAt", "expiresAt"}
    assert body["secret"].startswith(SECRET_PREFIX)
    assert body["expiresAt"] is not None
    listed = (await api.get("/v1/tokens", headers=admin)).json()
    assert [t["id"] for t in listed] == [body["id"]]
    assert "secret" not in listed[0]
    bad = await api.post("/v1/tokens", json={"name": "x", "scopes": ["nope"]}, headers=admin)
    assert bad.status_code == 422
    assert bad.json()["errors"][0]["loc"][:2] == ["body", "scopes"]
    gone = await api.delete(f"/v1/tokens/{body['id']}", headers=admin)
    assert gone.status_code == 200
    assert gone.json() == {"id": body["id"], "revoked": True}
    assert (
        await api.delete("/v1/tokens/00000000-0000-0000-0000-000000000000", headers=admin)
    ).status_code == 404


async def _run_id(client: Client) -> str:
    """A run id that exists (a run of an unregistered workflow stays pending)."""
    async with client.pool.acquire() as conn:
        row = await conn.fetchrow("SELECT gen_random_uuid()::text AS id")
    assert row is not None
    return str(row["id"])


# (scope granted, method, path, body, allowed?)
_PUBLISH = ("POST", "/v1/topics/order.created/events", {"payload": {"n": 1}})
_PUBLISH_OTHER = ("POST", "/v1/topics/billing.paid/events", {"payload": {"n": 1}})
_START = ("POST", "/v1/workflows/report/runs", {"input": None})
_LIST_RUNS = ("GET", "/v1/runs", None)
_METRICS = ("GET", "/metrics", None)
_CANCEL_MANY = ("POST", "/v1/runs/cancel", {"workflow": "report"})
_SEND = ("POST", "/v1/queues/jobs/messages", {"body": {"n": 1}})
_SEND_OTHER = ("POST", "/v1/queues/other/messages", {"body": {"n": 1}})
_RECEIVE = ("POST", "/v1/queues/jobs/messages/receive", {"maxMessages": 1})
_SIGNAL_MANY = ("POST", "/v1/signals", {"event": "order.created", "payload": {}})
_TOKENS = ("GET", "/v1/tokens", None)
_SUBSCRIBE = (
    "POST",
    "/v1/subscriptions",
    {"pattern": "order.#", "target": {"type": "queue", "queue": "audit"}},
)

MATRIX = [
    ("admin", [_PUBLISH, _START, _LIST_RUNS, _CANCEL_MANY, _SEND, _TOKENS, _METRICS], []),
    ("read", [_LIST_RUNS, _METRICS], [_PUBLISH, _START, _CANCEL_MANY, _SEND, _TOKENS, _SUBSCRIBE]),
    (
        "operate",
        [_LIST_RUNS, _METRICS, _CANCEL_MANY, _SIGNAL_MANY, _SUBSCRIBE],
        [_PUBLISH, _START, _SEND, _TOKENS],
    ),
    ("publish:order.*", [_PUBLISH], [_PUBLISH_OTHER, _LIST_RUNS, _START, _SEND, _TOKENS]),
    ("publish:#", [_PUBLISH, _PUBLISH_OTHER], [_LIST_RUNS, _SEND]),
    ("start:report", [_START], [_PUBLISH, _LIST_RUNS, _CANCEL_MANY]),
    ("start:*", [_START], [_PUBLISH, _SIGNAL_MANY]),
    ("signal:*", [_SIGNAL_MANY], [_START, _LIST_RUNS]),
    ("queue:jobs", [_SEND, _RECEIVE], [_SEND_OTHER, _LIST_RUNS, _PUBLISH]),
    ("queue:*", [_SEND, _SEND_OTHER, _RECEIVE], [_PUBLISH, _CANCEL_MANY]),
]


@pytest.mark.parametrize(("scope", "allowed", "refused"), MATRIX, ids=[m[0] for m in MATRIX])
async def test_each_scope_allowed_and_refused(
    secured: Client,
    api: httpx.AsyncClient,
    scope: str,
    allowed: list[tuple[str, str, object]],
    refused: list[tuple[str, str, object]],
) -> None:
    await secured.subscribe("order.#", QueueTarget("seen"))
    token = await secured.tokens.create(f"t-{scope}", scopes=[scope])
    assert token.secret is not None
    for method, path, body in allowed:
        answer = await api.request(method, path, json=body, headers=bearer(token.secret))
        assert answer.status_code not in (401, 403), (scope, method, path, answer.text)
    seen_before = (await secured.queues.stats("seen")).depth
    for method, path, body in refused:
        answer = await api.request(method, path, json=body, headers=bearer(token.secret))
        assert answer.status_code == 403, (scope, method, path, answer.text)
        assert answer.headers["content-type"].startswith("application/problem+json")
        assert "scope" in answer.json()["detail"]
    # Refused requests wrote nothing: no event reached the subscription's queue.
    assert (await secured.queues.stats("seen")).depth == seen_before


async def test_forbidden_names_the_scope_needed(secured: Client, api: httpx.AsyncClient) -> None:
    token = await secured.tokens.create("pub", scopes=["publish:order.*"])
    assert token.secret is not None
    answer = await api.post(
        "/v1/topics/billing.paid/events", json={"payload": 1}, headers=bearer(token.secret)
    )
    assert answer.status_code == 403
    assert "publish:billing.paid" in answer.json()["detail"]


async def test_unknown_revoked_and_expired_tokens_get_401(
    secured: Client, api: httpx.AsyncClient
) -> None:
    assert (await api.get("/v1/runs", headers=bearer("rpl_unknown"))).status_code == 401
    assert (await api.get("/v1/runs")).status_code == 401
    token = await secured.tokens.create(
        "short", scopes=["read"], expires_in=timedelta(milliseconds=300)
    )
    secret = token.secret
    assert secret is not None
    assert (await api.get("/v1/runs", headers=bearer(secret))).status_code == 200

    async def refused() -> bool:
        return (await api.get("/v1/runs", headers=bearer(secret))).status_code == 401

    await assert_eventually(refused, timeout=5)
    revoked = await secured.tokens.create("gone", scopes=["read"])
    assert revoked.secret is not None
    assert (await api.get("/v1/runs", headers=bearer(revoked.secret))).status_code == 200
    await secured.tokens.revoke(revoked.id)
    assert (await api.get("/v1/runs", headers=bearer(revoked.secret))).status_code == 401


async def test_actions_are_audited_as_the_token(secured: Client, api: httpx.AsyncClient) -> None:
    token = await secured.tokens.create("ops", scopes=["admin"])
    assert token.secret is not None
    answer = await api.post(
        "/v1/tokens",
        json={"name": "child", "scopes": ["read"]},
        headers={**bearer(token.secret), "x-request-id": "req-42"},
    )
    assert answer.status_code == 201
    rows = await _audit(secured, "token.create")
    assert (rows[-1]["actor"], rows[-1]["token_id"], rows[-1]["request_id"]) == (
        "ops",
        token.id,
        "req-42",
    )
    env = await api.post(
        "/v1/tokens", json={"name": "other", "scopes": ["read"]}, headers=bearer(ENV_TOKEN)
    )
    assert env.status_code == 201
    last = (await _audit(secured, "token.create"))[-1]
    assert last["actor"] == "env"
    assert last["token_id"] is None
    assert last["request_id"]


async def test_last_used_is_recorded_without_a_write_per_request(
    secured: Client, api: httpx.AsyncClient
) -> None:
    token = await secured.tokens.create("reader", scopes=["read"])
    assert token.secret is not None
    for _ in range(20):
        assert (await api.get("/v1/tokens/../runs", headers=bearer(token.secret))).status_code in (
            200,
            404,
        )
    (listed,) = [t for t in await secured.tokens.list() if t.id == token.id]
    assert listed.last_used_at is not None


async def test_rate_limit_answers_429_with_retry_after(
    secured: Client, api: httpx.AsyncClient
) -> None:
    token = await secured.tokens.create(
        "limited", scopes=["publish:#"], rate_limit=RateLimit(3, per=timedelta(hours=1))
    )
    assert token.secret is not None
    statuses = []
    for _ in range(5):
        answer = await api.post(
            "/v1/topics/a.b/events", json={"payload": 1}, headers=bearer(token.secret)
        )
        statuses.append(answer.status_code)
        if answer.status_code == 429:
            assert int(answer.headers["retry-after"]) >= 1
            assert answer.headers["content-type"].startswith("application/problem+json")
    assert statuses == [202, 202, 202, 429, 429]
    # Another token is not limited by this one's bucket.
    free = await secured.tokens.create("free", scopes=["publish:#"])
    assert free.secret is not None
    answer = await api.post(
        "/v1/topics/a.b/events", json={"payload": 1}, headers=bearer(free.secret)
    )
    assert answer.status_code == 202


async def test_requests_are_counted_by_token_name(secured: Client, api: httpx.AsyncClient) -> None:
    token = await secured.tokens.create("counted-name", scopes=["read", "publish:#"])
    assert token.secret is not None
    await api.post("/v1/topics/a.b/events", json={"payload": 1}, headers=bearer(token.secret))
    metrics = await api.get("/metrics", headers=bearer(token.secret))
    assert 'ripple_api_requests_total{token="counted-name"}' in metrics.text
    assert token.secret not in metrics.text


async def test_a_hot_route_request_is_counted_by_token_name(
    secured: Client, api: httpx.AsyncClient
) -> None:
    token = await secured.tokens.create("hot-publisher", scopes=["publish:#"])
    assert token.secret is not None
    answer = await api.post(
        "/v1/topics/a.b/events", json={"payload": 1}, headers=bearer(token.secret)
    )
    assert answer.status_code == 202
    metrics = await api.get("/metrics", headers=bearer(ENV_TOKEN))
    assert 'ripple_api_requests_total{token="hot-publisher"} 1.0' in metrics.text


async def test_a_failing_audit_insert_rolls_the_token_change_back(secured: Client) -> None:
    kept = await secured.tokens.create("kept", scopes=["read"])
    async with secured.pool.acquire() as conn:
        await conn.execute(
            "CREATE FUNCTION refuse_audit() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'audit refused by the test'; END $$;"
            "CREATE TRIGGER refuse_audit BEFORE INSERT ON ripple_audit "
            "FOR EACH ROW EXECUTE FUNCTION refuse_audit();"
        )
    with pytest.raises(RippleError):
        await secured.tokens.create("lost", scopes=["read"])
    with pytest.raises(RippleError):
        await secured.tokens.revoke(kept.id)
    listed = await secured.tokens.list()
    assert [(t.name, t.active) for t in listed] == [("kept", True)]


async def test_cloudevents_ingest_needs_publish_for_every_event_type(secured: Client) -> None:
    from ripple.platform.api.app import create_app

    app = create_app(secured)
    token = await secured.tokens.create("ce", scopes=["publish:order.*"])
    assert token.secret is not None
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        auth = bearer(token.secret)
        ce = {"content-type": "application/cloudevents+json", **auth}
        batch = {"content-type": "application/cloudevents-batch+json", **auth}
        one = {"specversion": "1.0", "id": "1", "source": "s", "type": "order.created"}
        other = {**one, "id": "2", "type": "billing.paid"}
        binary = {
            **auth,
            "content-type": "application/json",
            "ce-specversion": "1.0",
            "ce-id": "4",
            "ce-source": "s",
        }
        cases = [
            ({"json": one, "headers": ce}, 202),
            ({"json": other, "headers": ce}, 403),
            ({"json": [one, {**one, "id": "3", "type": "order.paid"}], "headers": batch}, 202),
            ({"json": [one, other], "headers": batch}, 403),
            ({"json": {}, "headers": {**binary, "ce-type": "order.created"}}, 202),
            ({"json": {}, "headers": {**binary, "ce-type": "billing.paid"}}, 403),
            # a type that is not a string needs publish:# (and is not a server error)
            ({"json": {**one, "type": {}}, "headers": ce}, 403),
            ({"json": [one, {**one, "type": ["order.paid"]}], "headers": batch}, 403),
        ]
        for kwargs, status in cases:
            answer = await http.post("/v1/events", **kwargs)  # type: ignore[arg-type]
            assert answer.status_code == status, (kwargs, answer.text)


async def test_dashboard_session_of_a_stored_token_keeps_its_scopes_until_revoked(
    secured: Client, api: httpx.AsyncClient
) -> None:
    run = await secured.start("ui-token", {})
    reader = await secured.tokens.create("viewer", scopes=["read"])
    operator = await secured.tokens.create("operator", scopes=["read", "operate"])
    assert reader.secret is not None
    assert operator.secret is not None

    login = await api.post("/ui/login", data={"token": reader.secret, "next": "/ui/runs"})
    assert login.status_code == 303
    page = await api.get(f"/ui/runs/{run.run_id}")
    assert page.status_code == 200
    refused = await api.post(f"/ui/runs/{run.run_id}/cancel", data={"csrf": csrf_of(page.text)})
    assert refused.status_code == 403
    assert await _audit(secured, "run.cancel") == []

    api.cookies.clear()
    login = await api.post("/ui/login", data={"token": operator.secret, "next": "/ui/runs"})
    assert login.status_code == 303
    page = await api.get(f"/ui/runs/{run.run_id}")
    done = await api.post(f"/ui/runs/{run.run_id}/cancel", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303
    (canceled,) = await _audit(secured, "run.cancel")
    assert (canceled["actor"], canceled["token_id"]) == ("operator", operator.id)

    await secured.tokens.revoke(operator.id)
    after = await api.get("/ui/runs")
    assert after.status_code == 303
    assert after.headers["location"].startswith("/ui/login")
