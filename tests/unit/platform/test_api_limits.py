"""Request limits and problem mapping of the API, exercised in-process (no database)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from ripple.platform.api.deps import token_valid
from ripple.platform.api.limits import RequestLimits, json_depth
from ripple.platform.api.problems import PROBLEM_JSON, install_problem_handlers
from ripple.platform.errors import Conflict, InvalidInput, NotFound, StorageError, Unavailable
from ripple.workflows.errors import WorkflowFailed


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{}", 1),
        ('{"a": [1, {"b": 2}]}', 3),
        ('"[[[[[["', 0),
        ('{"a": "\\"[[[[[[[["}', 1),
        (_nested(40), 33),  # stops counting past the limit
    ],
)
def test_json_depth__counts_nesting_outside_strings(text: str, expected: int) -> None:
    assert json_depth(text.encode(), 32) == expected or (
        expected <= 32 and json_depth(text.encode(), 32) <= 32
    )


def test_json_depth__strings_full_of_brackets_are_not_nesting() -> None:
    text = json.dumps({"s": "[" * 100 + "{" * 100})
    assert json_depth(text.encode(), 32) == 1


def test_token_valid__matches_any_configured_token() -> None:
    assert token_valid("b", ["a", "b"])
    assert not token_valid("c", ["a", "b"])
    assert not token_valid("", ["a"])


class Body(BaseModel):
    value: Any = None


def _app(max_body: int = 2048, max_depth: int = 8) -> FastAPI:
    app = FastAPI()

    @app.post("/echo")
    async def echo(body: Body) -> dict[str, Any]:
        return {"value": body.value}

    errors: dict[str, Exception] = {
        "invalid": InvalidInput("bad name", field="name"),
        "missing": NotFound("no such thing"),
        "conflict": Conflict("already there"),
        "down": Unavailable("database unavailable"),
        "storage": StorageError("database error: secret detail"),
        "failed": WorkflowFailed("r1", {"type": "ValueError", "message": "boom"}),
        "bug": RuntimeError("internal detail"),
    }

    @app.get("/raise/{kind}")
    async def raise_(kind: str) -> None:
        raise errors[kind]

    install_problem_handlers(app)
    app.add_middleware(RequestLimits, max_body_bytes=max_body, max_depth=max_depth)
    return app


@pytest.fixture
async def http() -> Any:
    transport = httpx.ASGITransport(app=_app(), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM_JSON)
    body = response.json()
    assert body["status"] == status
    assert body["type"].startswith("urn:ripple:problem:")
    assert body["title"]
    assert body["instance"]
    return body


async def test_api_limits__body_over_limit_is_413_before_parsing(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/echo", content=b"{" * 5000, headers={"content-type": "application/json"}
    )
    body = _problem(response, 413)
    assert "2048" in body["detail"]


async def test_api_limits__streamed_body_without_length_is_counted(
    http: httpx.AsyncClient,
) -> None:
    async def chunks() -> Any:
        for _ in range(10):
            yield b" " * 500

    response = await http.post(
        "/echo", content=chunks(), headers={"content-type": "application/json"}
    )
    _problem(response, 413)


async def test_api_limits__too_deep_json_is_422(http: httpx.AsyncClient) -> None:
    response = await http.post("/echo", content=('{"value": ' + _nested(20) + "}").encode())
    body = _problem(response, 422)
    assert body["type"].endswith("json-too-deep")


async def test_api_limits__malformed_json_is_400(http: httpx.AsyncClient) -> None:
    response = await http.post(
        "/echo", content=b'{"value": ', headers={"content-type": "application/json"}
    )
    body = _problem(response, 400)
    assert body["type"].endswith("malformed-json")


async def test_api_limits__validation_errors_are_listed(http: httpx.AsyncClient) -> None:
    response = await http.post("/echo", json=[1, 2])
    body = _problem(response, 422)
    assert body["errors"]
    assert body["errors"][0]["loc"][0] == "body"


async def test_api_limits__small_body_passes_through(http: httpx.AsyncClient) -> None:
    response = await http.post("/echo", json={"value": {"a": [1, 2]}})
    assert response.status_code == 200
    assert response.json() == {"value": {"a": [1, 2]}}


@pytest.mark.parametrize(
    ("kind", "status", "leaks"),
    [
        ("invalid", 422, None),
        ("missing", 404, None),
        ("conflict", 409, None),
        ("down", 503, None),
        ("storage", 500, "secret detail"),
        ("failed", 409, None),
        ("bug", 500, "internal detail"),
    ],
)
async def test_api_problems__errors_map_to_statuses(
    http: httpx.AsyncClient, kind: str, status: int, leaks: str | None
) -> None:
    body = _problem(await http.get(f"/raise/{kind}"), status)
    if leaks:
        assert leaks not in json.dumps(body)


async def test_api_problems__unknown_route_and_wrong_method(http: httpx.AsyncClient) -> None:
    assert "no route" in _problem(await http.get("/nope"), 404)["detail"]
    _problem(await http.delete("/echo"), 405)


@pytest.fixture
async def roomy() -> Any:
    """The test app with room for 4,300-digit numbers."""
    transport = httpx.ASGITransport(app=_app(max_body=16_384), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        yield client


@pytest.mark.parametrize(
    ("content", "status", "slug", "says"),
    [
        (b'{"value": 1, "value": 2}', 422, "invalid-input", "duplicate key 'value'"),
        (b'{"value": {"a": 1, "b": [{"c": 1, "c": 1}]}}', 422, "invalid-input", "'c'"),
        (b'{"value": NaN}', 422, "invalid-input", "NaN is not JSON"),
        (b'{"value": [Infinity]}', 422, "invalid-input", "Infinity is not JSON"),
        (b'{"value": -Infinity}', 422, "invalid-input", "-Infinity is not JSON"),
        (b'{"value": "\xff\xfe"}', 400, "bad-request", "not UTF-8"),
        (b'{"value": ' + b"9" * 4301 + b"}", 400, "bad-request", "4300 digits"),
    ],
)
async def test_strict_json_bodies(
    roomy: httpx.AsyncClient, content: bytes, status: int, slug: str, says: str
) -> None:
    response = await roomy.post(
        "/echo", content=content, headers={"content-type": "application/json"}
    )
    body = _problem(response, status)
    assert body["type"].endswith(slug)
    assert says in body["detail"]


async def test_big_but_readable_numbers_and_repeated_keys_in_strings_pass(
    roomy: httpx.AsyncClient,
) -> None:
    content = b'{"value": [' + b"9" * 4300 + b', {"a": "a", "b": "\\"a\\": 1"}]}'
    response = await roomy.post(
        "/echo", content=content, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
async def test_wrong_content_type_is_415(roomy: httpx.AsyncClient, content_type: str) -> None:
    response = await roomy.post(
        "/echo", content=b'{"value": 1}', headers={"content-type": content_type}
    )
    body = _problem(response, 415)
    assert body["type"].endswith("unsupported-media-type")
    assert "application/json" in body["detail"]
    # JSON types and a missing Content-Type (read as JSON) are accepted
    for ok in ("application/json; charset=utf-8", "application/merge-patch+json"):
        response = await roomy.post("/echo", content=b'{"value": 1}', headers={"content-type": ok})
        assert response.status_code == 200, response.text


async def test_api_limits__an_over_long_uri_gets_414() -> None:
    import httpx

    from ripple.platform.api.limits import MAX_URI_BYTES, RequestLimits

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        raise AssertionError("the app must not see an over-long request")

    limited = RequestLimits(app, max_body_bytes=1024, max_depth=8)  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=limited)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        response = await http.get("/v1/topics/a/explain", params={"q": "x" * MAX_URI_BYTES})
    assert response.status_code == 414
    assert response.json()["type"].endswith("uri-too-long")
