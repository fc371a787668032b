"""The AsyncAPI builder (pure): channels, `$defs` moved to components, operations per kind."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ripple.platform.events.contracts.asyncapi import build_asyncapi
from ripple.platform.events.contracts.records import SchemaVersion
from ripple.platform.events.subscription_store import SubscriptionRecord

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _sub(pattern: str, kind: str, target: dict[str, Any]) -> SubscriptionRecord:
    return SubscriptionRecord(
        f"id-{pattern}-{kind}", pattern, kind, target, None, "active", None, NOW, NOW
    )


def test_asyncapi_builder__defs_become_components_and_refs_follow() -> None:
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"address": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}]}},
        "$defs": {
            "Address": {"type": "object", "properties": {"geo": {"$ref": "#/$defs/Geo"}}},
            "Geo": {"type": "object"},
        },
    }
    doc = build_asyncapi([SchemaVersion("user.signup", 3, schema, "full", NOW)], [])
    payload = doc["components"]["messages"]["user.signup"]["payload"]
    assert "$defs" not in payload
    assert "$schema" not in payload
    ref = payload["properties"]["address"]["anyOf"][0]["$ref"]
    assert ref == "#/components/schemas/user.signup.Address"
    address = doc["components"]["schemas"]["user.signup.Address"]
    assert address["properties"]["geo"]["$ref"] == "#/components/schemas/user.signup.Geo"
    assert schema["$defs"]  # the input is not changed
    assert "servers" not in doc


def test_asyncapi_builder__receive_operations_per_matching_kind_without_secrets() -> None:
    schemas = [SchemaVersion("order.paid", 1, {"type": "object"}, "backward", NOW)]
    subs = [
        _sub("order.*", "queue", {"queue": "orders"}),
        _sub("user.*", "queue", {"queue": "users"}),  # does not match
        _sub("#", "webhook", {"url": "https://h.example.com/p?k=s3cret", "secret": "whsec_x"}),
    ]
    doc = build_asyncapi(schemas, subs, host="api.example.com:8000")
    ops = doc["operations"]
    assert sorted(ops) == [
        "order.paid.cloudevents",
        "order.paid.publish",
        "order.paid.receive.queue",
        "order.paid.receive.webhook",
    ]
    assert "orders" in ops["order.paid.receive.queue"]["description"]
    assert "users" not in ops["order.paid.receive.queue"]["description"]
    assert "h.example.com" in ops["order.paid.receive.webhook"]["description"]
    assert "s3cret" not in str(doc)
    assert "whsec_x" not in str(doc)
    assert doc["servers"]["api"]["host"] == "api.example.com:8000"
    assert doc["channels"]["order.paid"]["address"] == "order.paid"
