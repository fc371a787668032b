"""The hot routes (publish, start) answer exactly as the FastAPI routes do, on a real database.

Every request is sent to the app as built (`HotRoutes` in its stack) and to the same app without
that middleware; status, headers and body must be the same, ids aside. The cases cover what the
middleware answers itself, what it hands to the routes (tokens, bodies and path parameters the
routes refuse, queries, content types), and errors raised by the client under it.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from ripple.platform.api.app import create_app
from ripple.platform.api.deps import get_client
from ripple.platform.api.hot_routes import HotRoutes
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.subscribers import QueueTarget

JSON = {"content-type": "application/json"}
TOKENS = ["tok-one", "tok-two"]
_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")

#: (method, path, body, headers); `{key}` in a body becomes a key unique to the app under test.
Case = tuple[str, str, bytes, dict[str, str]]


def _cold(app: FastAPI) -> FastAPI:
    """`app` without `HotRoutes`: every request through the FastAPI routes."""
    app.user_middleware = [m for m in app.user_middleware if m.cls is not HotRoutes]  # type: ignore[comparison-overlap]
    return app


@pytest.fixture
async def apps(client: Client) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    async with _clients(client) as clients:
        yield clients


class _clients:
    """HTTP clients on the hot and the cold app of `client`."""

    def __init__(self, client: Client) -> None:
        self._apps = {"hot": create_app(client), "cold": _cold(create_app(client))}
        self._http: dict[str, httpx.AsyncClient] = {}

    async def __aenter__(self) -> dict[str, httpx.AsyncClient]:
        for name, app in self._apps.items():
            transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
            self._http[name] = httpx.AsyncClient(transport=transport, base_url="http://test")
        return self._http

    async def __aexit__(self, *exc: object) -> None:
        for http in self._http.values():
            await http.aclose()


async def _answer(http: httpx.AsyncClient, case: Case, label: str) -> tuple[Any, ...]:
    method, path, body, headers = case
    response = await http.request(
        method, path, content=body.replace(b"{key}", label.encode()), headers=headers
    )
    text = _ID.sub("<id>", response.text.replace(label, "<key>"))
    shown = dict(response.headers)
    return response.status_code, shown, json.loads(text) if text else None


async def _same(apps: dict[str, httpx.AsyncClient], cases: list[Case]) -> list[tuple[Any, ...]]:
    """Send each case to both apps (hot first); assert equal answers; return them."""
    answers = []
    for case in cases:
        hot = await _answer(apps["hot"], case, "key-of-hot-app")
        cold = await _answer(apps["cold"], case, "key-of-cold-app")
        assert hot == cold, case
        answers.append(hot)
    return answers


def _post(path: str, body: bytes | dict[str, Any] | list[Any], **headers: str) -> Case:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    return "POST", path, raw, {**JSON, **headers}


async def test_hot_publish_answers_as_the_route(
    client: Client, apps: dict[str, httpx.AsyncClient]
) -> None:
    await client.subscribe("hot.#", QueueTarget("hot-audit"))
    events = "/v1/topics/hot.event/events"
    keyed = _post(events, b'{"payload": {"n": 2}, "idempotencyKey": "{key}"}')
    cases = [
        _post(events, {"payload": {"n": 1}}),
        keyed,
        keyed,  # the repeat: duplicate, no deliveries
        _post(events, {"payload": [1, "two", None, 3.5]}),
        _post(events, b'{"payload": {"big": 1e400}}'),  # json.loads reads it as infinity
        _post(events, b'{"payload": 1, "idempotency_key": "{key}-snake"}'),
        _post(events, b'{"payload": "\\ud800"}'),  # a lone surrogate
        _post(events, {"payload": None}),  # refused by the client: its handler answers
        _post(events, {}),
        _post(events, {"payload": 1, "extra": True}),
        _post(events, {"payload": 1, "idempotencyKey": ""}),
        _post(events, [1]),
        _post(events, b'"text"'),
        _post(events, b'{"payload": '),
        _post(events, {"payload": "x" * 2_000_000}),
        _post(events, {"payload": 1}, **{"content-type": "application/cloudevents+json"}),
        _post(events, {"payload": 1}, **{"content-type": "text/plain"}),
        ("POST", events, b'{"payload": 1}', {}),
        _post(events + "?verbose=1", {"payload": 1}),
        _post("/v1/topics/Hot.Event/events", {"payload": 1}),
        _post("/v1/topics/hot..event/events", {"payload": 1}),
        _post("/v1/topics/hot.event%0A/events", {"payload": 1}),
        _post("/v1/topics/" + "a" * 256 + "/events", {"payload": 1}),
        _post("/v1/topics/hot.event/events/", {"payload": 1}),
        ("PUT", events, b'{"payload": 1}', JSON),
    ]
    answers = await _same(apps, cases)
    statuses = [status for status, _, _ in answers]
    assert statuses[:4] == [202, 202, 202, 202]
    assert answers[2][2]["duplicate"]
    assert answers[2][2]["deliveries"] == 0
    assert {400, 405, 413, 415, 422} <= set(statuses)
    delivered = sum(body["deliveries"] for status, _, body in answers if status == 202)
    audit = await client.pool.fetchval(
        "SELECT count(*) FROM ripple_queue_messages WHERE queue = 'hot-audit'"
    )
    assert audit == 2 * delivered  # what each app answered is what it wrote


async def test_hot_start_answers_as_the_route(
    client: Client, apps: dict[str, httpx.AsyncClient]
) -> None:
    runs = "/v1/workflows/hot-flow/runs"
    keyed = _post(runs, b'{"input": {"n": 2}, "idempotencyKey": "{key}"}')
    cases = [
        _post(runs, {}),
        _post(runs, {"input": {"n": 1}, "priority": 3, "deadline": 60}),
        keyed,
        keyed,
        _post(runs, {"input": 1, "deadline": "2030-01-01T00:00:00Z", "version": 2}),
        _post(runs, {"input": 1, "priority": -1}),
        _post(runs, {"input": 1, "version": 0}),
        _post(runs, {"input": 1, "deadline": "soon"}),
        _post(runs, {"input": 1, "unknown": 1}),
        _post(runs, b'{"input": 1, "idempotency_key": "{key}-snake", "priority": true}'),
        _post(runs, {"input": 1, "deadline": 0}),
        _post(runs, {"input": 1, "version": 1.5}),
        _post(runs + "?wait=0", {"input": 1}),
        _post("/v1/workflows/Hot-Flow/runs", {}),
        _post("/v1/workflows/" + "a" * 65 + "/runs", {}),
    ]
    statuses = [status for status, _, _ in await _same(apps, cases)]
    assert statuses[:5] == [201, 201, 201, 201, 201]
    assert statuses.count(422) >= 5
    runs_written = await client.pool.fetchval(
        "SELECT count(*) FROM ripple_runs WHERE workflow = 'hot-flow'"
    )
    assert runs_written == 2 * (statuses.count(201) - 1)  # each 201 but the keyed repeat


@pytest.fixture
async def token_client(settings: Settings) -> AsyncIterator[Client]:
    async with Client(settings=settings.model_copy(update={"api_tokens": TOKENS})) as connected:
        yield connected


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "Bearer tok-two",
        "bearer tok-one",
        "Bearer  tok-one ",
        "Bearer tok-three",
        "Basic tok-one",
        "Bearer",
        "tok-one",
    ],
)
async def test_hot_routes_take_the_routes_auth(
    token_client: Client, authorization: str | None
) -> None:
    headers = {} if authorization is None else {"authorization": authorization}
    cases = [
        _post("/v1/topics/auth.event/events", {"payload": 1}, **headers),
        _post("/v1/workflows/auth-flow/runs", {}, **headers),
    ]
    async with _clients(token_client) as apps:
        statuses = [status for status, _, _ in await _same(apps, cases)]
    valid = authorization is not None and authorization.split()[-1] in TOKENS
    valid = valid and authorization is not None and authorization.lower().startswith("bearer ")
    assert statuses == ([202, 201] if valid else [401, 401])


async def test_hot_routes_skip_the_route_machinery(client: Client) -> None:
    """A publish and a start that the middleware answers never solve the routes' dependencies:
    with the client dependency broken they still succeed; a body it refuses goes to the route."""

    async def broken() -> Client:
        raise AssertionError("the route's dependencies were solved")

    hot, cold = create_app(client), _cold(create_app(client))
    for app, expected in ((hot, (202, 201, 500)), (cold, (500, 500, 500))):
        app.dependency_overrides[get_client] = broken
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            published = await http.post("/v1/topics/skip.event/events", json={"payload": 1})
            started = await http.post("/v1/workflows/skip-flow/runs", json={})
            refused = await http.post("/v1/topics/skip.event/events", json={"payload": 1, "x": 2})
        assert (published.status_code, started.status_code, refused.status_code) == expected
