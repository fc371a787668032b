"""The OpenAPI document covers API.md's REST table and documents problem responses (no I/O)."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from ripple.platform.api.app import create_app
from ripple.platform.api.models import jsonable
from ripple.platform.core.config import load_settings

#: API.md's REST table (plus the extras documented in docs/api.md).
ROUTES = [
    ("post", "/v1/workflows/{name}/runs"),
    ("get", "/v1/workflows/{name}/runs"),
    ("get", "/v1/workflows/{name}/runs/{run_id}"),
    ("delete", "/v1/workflows/{name}/runs/{run_id}"),
    ("post", "/v1/workflows/{name}/runs/{run_id}/signals/{signal}"),
    ("get", "/v1/workflows/{name}/runs/{run_id}/steps"),
    ("get", "/v1/workflows"),
    ("post", "/v1/signals"),
    ("post", "/v1/topics/{topic}/events"),
    ("get", "/v1/topics/{topic}/explain"),
    ("post", "/v1/subscriptions"),
    ("get", "/v1/subscriptions"),
    ("delete", "/v1/subscriptions/{subscription_id}"),
    ("post", "/v1/subscriptions/{subscription_id}/pause"),
    ("post", "/v1/queues/{queue}/messages"),
    ("post", "/v1/queues/{queue}/messages/receive"),
    ("delete", "/v1/queues/{queue}/messages/{receipt}"),
    ("get", "/v1/queues/{queue}/stats"),
    ("get", "/v1/deliveries"),
    ("post", "/v1/deliveries/{delivery_id}/redrive"),
    ("post", "/v1/runs/{run_id}/retry"),
    ("post", "/v1/runs/{run_id}/fork"),
    ("post", "/v1/runs/cancel"),
    ("post", "/v1/runs/retry"),
    ("post", "/v1/subscriptions/{subscription_id}/replay"),
    ("get", "/v1/audit"),
    ("post", "/v1/events"),
    ("get", "/asyncapi.json"),
    ("get", "/metrics"),
    ("get", "/healthz"),
    ("get", "/readyz"),
]


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    app = create_app(load_settings(database_url="postgresql://unused@127.0.0.1:1/none"))
    return app.openapi()


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_api_openapi__route_is_documented(openapi: dict[str, Any], method: str, path: str) -> None:
    assert method in openapi["paths"][path]


def test_api_openapi__v1_routes_document_problems_and_bearer_auth(openapi: dict[str, Any]) -> None:
    assert openapi["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    for path, item in openapi["paths"].items():
        if not path.startswith("/v1"):
            continue
        for method, operation in item.items():
            for status in ("401", "413", "422"):
                content = operation["responses"][status]["content"]
                assert "application/problem+json" in content, (method, path, status)
            assert operation.get("security"), (method, path)


def test_api_openapi__bodies_are_camel_case_with_examples(openapi: dict[str, Any]) -> None:
    start = openapi["components"]["schemas"]["StartRun"]["properties"]
    assert {"input", "version", "idempotencyKey", "deadline"} <= set(start)
    assert start["idempotencyKey"]["examples"] == ["signup-42"]


@dataclass
class _Record:
    run_id: str
    created_at: datetime
    input: dict[str, Any]


def test_api_models__jsonable_camel_cases_fields_but_not_user_data() -> None:
    when = datetime(2026, 1, 2, tzinfo=UTC)
    record = _Record("r1", when, {"user_id": 1, "nested": {"snake_key": [1]}})
    assert jsonable(record) == {
        "runId": "r1",
        "createdAt": "2026-01-02T00:00:00+00:00",
        "input": {"user_id": 1, "nested": {"snake_key": [1]}},
    }


SIGNAL_PATHS = [
    "/v1/signals",
    "/v1/runs/{run_id}/signals/{signal}",
    "/v1/workflows/{name}/runs/{run_id}/signals/{signal}",
]


@pytest.mark.parametrize("path", SIGNAL_PATHS)
def test_api_openapi__a_signal_documents_one_idempotency_key_the_header(
    openapi: dict[str, Any], path: str
) -> None:
    operation = openapi["paths"][path]["post"]
    keys = [
        (p["in"], p["name"]) for p in operation.get("parameters", []) if "dempotency" in p["name"]
    ]
    assert keys == [("header", "Idempotency-Key")]
    assert "idempotencyKey" not in str(operation.get("requestBody", {}))
    assert "idempotencyKey" not in str(openapi["components"]["schemas"]["SignalMatching"])


def _keywords(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keywords(v)}
    if isinstance(value, list):
        return {k for v in value for k in _keywords(v)}
    return set()


def test_api_openapi__bounds_are_json_schema_keywords(openapi: dict[str, Any]) -> None:
    """pydantic writes its own `ge`/`le` names for bounds it cannot place (an optional field
    whose type carries a validator); JSON Schema ignores them, so nothing would be declared."""
    assert not _keywords(openapi) & {"ge", "le", "gt", "lt"}
    redrive = openapi["components"]["schemas"]["RedriveIn"]["properties"]["limit"]
    assert {"type": "integer", "minimum": 1, "maximum": 100_000} in redrive["anyOf"]


@pytest.mark.parametrize(
    ("model", "body"),
    [
        ("ripple.platform.api.queues:SendIn", {"body": 1, "delay": False}),
        ("ripple.platform.api.queues:SendIn", {"body": 1, "delay": "5"}),
        ("ripple.platform.api.queues:ReceiveIn", {"wait": False}),
        ("ripple.platform.api.queues:NackIn", {"delay": True}),
        ("ripple.platform.api.recovery:CancelFilterIn", {"dryRun": 0}),
        ("ripple.platform.api.recovery:RetryFilterIn", {"dryRun": "true"}),
        ("ripple.platform.api.recovery:RetryFilterIn", {"status": "waiting"}),
        ("ripple.platform.api.runs:StartRun", {"priority": False}),
        ("ripple.platform.api.runs:StartRun", {"version": True}),
        ("ripple.platform.api.runs:StartRun", {"deadline": True}),
        ("ripple.platform.api.schedules:ScheduleIn", {"name": "n", "every": 5e-324}),
    ],
)
def test_api_models__json_types_are_strict(model: str, body: dict[str, Any]) -> None:
    module, _, name = model.partition(":")
    cls = getattr(importlib.import_module(module), name)
    with pytest.raises(ValidationError):
        cls.model_validate(body)


def test_api_models__numbers_still_take_integral_floats_and_ints() -> None:
    from ripple.platform.api.queues import ReceiveIn
    from ripple.platform.api.runs import StartRun

    assert StartRun.model_validate({"priority": 2.0, "version": 1}).priority == 2
    assert ReceiveIn.model_validate({"wait": 1, "maxMessages": 3.0}).wait == 1.0


def test_api_openapi__cloudevents_ingest_documents_its_modes(openapi: dict[str, Any]) -> None:
    operation = openapi["paths"]["/v1/events"]["post"]
    content = operation["requestBody"]["content"]
    assert set(content) == {"application/cloudevents+json", "application/cloudevents-batch+json"}
    event = content["application/cloudevents+json"]["schema"]
    assert event["required"] == ["specversion", "id", "source", "type"]
    assert "ce-specversion" in operation["description"]  # binary mode
    assert "400" in operation["responses"]
