"""Token scopes: validation at creation, what each grants, and the scope each route needs."""

from __future__ import annotations

import pytest

from ripple.platform.access.scopes import Need, permits, validate_scopes
from ripple.platform.api.access import need_of, request_id
from ripple.platform.errors import InvalidInput
from ripple.platform.events.topics import compile_pattern, validate_pattern


def _matches(pattern: str, topic: str) -> bool:
    return compile_pattern(pattern).matches(topic)


def test_valid_scopes_are_kept_in_order_without_repeats() -> None:
    scopes = [
        "read",
        "publish:order.*",
        "publish:billing.#",
        "start:*",
        "signal:refund",
        "queue:jobs",
        "read",
    ]
    assert validate_scopes(scopes, validate_pattern) == scopes[:-1]


@pytest.mark.parametrize(
    "scopes",
    [
        [],
        "read",
        ["root"],
        ["Read"],
        ["publish"],
        ["publish:"],
        ["publish:Order.*"],
        ["publish:a.b*"],
        ["start:"],
        ["start:re*"],
        ["queue:a b"],
        ["signal:" + "x" * 256],
        [7],
    ],
)
def test_invalid_scopes_are_refused(scopes: object) -> None:
    with pytest.raises(InvalidInput) as info:
        validate_scopes(scopes, validate_pattern)
    assert info.value.field == "scopes"


@pytest.mark.parametrize(
    ("scope", "granted", "refused"),
    [
        ("admin", [Need("admin"), Need("operate"), Need("publish", "a.b"), Need("queue", "q")], []),
        ("read", [Need("read")], [Need("operate"), Need("publish", "a"), Need("admin")]),
        (
            "operate",
            [Need("read"), Need("operate"), Need("signal", "wf")],
            [Need("admin"), Need("publish", "a"), Need("start", "wf"), Need("queue", "q")],
        ),
        (
            "publish:order.*",
            [Need("publish", "order.created")],
            [Need("publish", "order.created.eu"), Need("publish", "billing.paid"), Need("read")],
        ),
        (
            "publish:billing.#",
            [Need("publish", "billing"), Need("publish", "billing.a.b")],
            [Need("publish", "order.x")],
        ),
        (
            "start:report",
            [Need("start", "report")],
            [Need("start", "other"), Need("signal", "report")],
        ),
        ("start:*", [Need("start", "anything")], [Need("publish", "a")]),
        (
            "signal:refund",
            [Need("signal", "refund")],
            [Need("signal", "*"), Need("start", "refund")],
        ),
        ("queue:jobs", [Need("queue", "jobs")], [Need("queue", "other"), Need("read")]),
        ("queue:*", [Need("queue", "jobs"), Need("queue", "x")], [Need("operate")]),
    ],
)
def test_what_each_scope_grants(scope: str, granted: list[Need], refused: list[Need]) -> None:
    for need in granted:
        assert permits([scope], need, _matches), need
    for need in refused:
        assert not permits([scope], need, _matches), need


@pytest.mark.parametrize(
    ("method", "template", "params", "need"),
    [
        ("GET", "/v1/runs", {}, "read"),
        ("GET", "/metrics", {}, "read"),
        ("GET", "/v1/tokens", {}, "admin"),
        ("DELETE", "/v1/tokens/{token_id}", {"token_id": "x"}, "admin"),
        ("GET", "/v1/audit", {}, "admin"),
        ("POST", "/v1/topics/{topic}/events", {"topic": "a.b"}, "publish:a.b"),
        ("POST", "/v1/workflows/{name}/runs", {"name": "wf"}, "start:wf"),
        (
            "POST",
            "/v1/workflows/{name}/runs/{run_id}/signals/{signal}",
            {"name": "wf"},
            "signal:wf",
        ),
        ("POST", "/v1/signals", {}, "signal:*"),
        ("POST", "/v1/queues/{queue}/messages", {"queue": "q"}, "queue:q"),
        ("POST", "/v1/queues/{queue}/messages/receive", {"queue": "q"}, "queue:q"),
        ("DELETE", "/v1/queues/{queue}/messages/{receipt}", {"queue": "q"}, "queue:q"),
        ("POST", "/v1/queues/{queue}/messages/{receipt}/nack", {"queue": "q"}, "queue:q"),
        ("GET", "/v1/queues/{queue}/stats", {"queue": "q"}, "read"),
        ("POST", "/v1/queues/{queue}/dead-letters/redrive", {"queue": "q"}, "operate"),
        ("DELETE", "/v1/runs/{run_id}", {}, "operate"),
        ("POST", "/v1/runs/cancel", {}, "operate"),
        ("PUT", "/v1/topics/{topic}/schema", {"topic": "a"}, "operate"),
        ("POST", "/v1/runs/{run_id}/wake", {}, "operate"),
    ],
)
def test_the_scope_each_route_needs(
    method: str, template: str, params: dict[str, str], need: str
) -> None:
    assert str(need_of(method, template, params)) == need


def test_signal_by_run_id_needs_the_runs_workflow_looked_up() -> None:
    assert need_of("POST", "/v1/runs/{run_id}/signals/{signal}", {}) == Need("signal")


def test_request_id_is_the_callers_when_usable() -> None:
    assert request_id([(b"x-request-id", b"abc-1")]) == "abc-1"
    generated = request_id([(b"x-request-id", b"x" * 500)])
    assert generated != "x" * 500
    assert len(generated) == 32
    assert request_id([]) != request_id([])
