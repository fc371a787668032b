"""The AsyncAPI 3.0.0 document of Ripple's typed topics; pure (no I/O).

A channel per topic that has a schema (its `address` is the topic) with one message whose
payload is the topic's latest schema; `send` operations for publishing it (the REST publish and
CloudEvents ingest) and `receive` operations for each kind of subscription that matches it.
A JSON Schema's own `$defs` move to `components.schemas` (an AsyncAPI document resolves `$ref`
from its root), and keywords naming the 2020-12 dialect are dropped, since AsyncAPI's default
schema format is its draft-07 superset. Webhook targets are described by host only: a URL may
carry a secret.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from typing import Any, Final, Protocol
from urllib.parse import urlsplit

from ripple.platform.events.contracts.records import SchemaVersion
from ripple.platform.events.topics import compile_pattern

__all__ = ["ASYNCAPI_VERSION", "SubscriptionLike", "build_asyncapi"]

ASYNCAPI_VERSION: Final = "3.0.0"
_HTTP_BINDING: Final = {"http": {"method": "POST", "bindingVersion": "0.3.0"}}
_COMPONENT_KEY: Final = re.compile(r"[^A-Za-z0-9._-]")
_KIND_TEXT: Final = {
    "queue": "Each event becomes a message on a durable queue (body = payload).",
    "webhook": "Each event is POSTed to an HTTP endpoint, signed (Standard Webhooks), as "
    "Ripple's envelope or a CloudEvent.",
    "workflow": "Each event starts a durable workflow run (input = payload).",
}


class SubscriptionLike(Protocol):
    """What the document says of a subscription (`client.list_subscriptions()` items)."""

    @property
    def id(self) -> str: ...
    @property
    def pattern(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def target(self) -> dict[str, Any]: ...
    @property
    def status(self) -> str: ...


def build_asyncapi(
    schemas: Sequence[SchemaVersion],
    subscriptions: Sequence[SubscriptionLike],
    *,
    host: str | None = None,
    title: str = "Ripple",
) -> dict[str, Any]:
    """The AsyncAPI 3.0.0 document for `schemas` (each topic's latest) and `subscriptions`.

    `host` (e.g. `localhost:8000`): the API server publishers reach, declared as a server.
    """
    doc: dict[str, Any] = {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": f"{title} topics",
            "version": "1",
            "description": "Topics with a registered payload schema. Publish with "
            "`POST /v1/topics/{topic}/events` or as a CloudEvent (`POST /v1/events`, "
            "`type` = topic); subscribers receive them through queues, webhooks and workflows.",
        },
        "defaultContentType": "application/json",
        "channels": {},
        "operations": {},
        "components": {"schemas": {}, "messages": {}},
    }
    if host:
        doc["servers"] = {
            "api": {
                "host": host,
                "protocol": "http",
                "pathname": "/v1",
                "description": "Ripple's REST API (bearer token).",
            }
        }
    components = doc["components"]
    for version in sorted(schemas, key=lambda v: v.topic):
        key = _key(version.topic)
        payload = _payload(version, components["schemas"])
        components["messages"][key] = {
            "name": version.topic,
            "title": version.topic,
            "summary": f"Schema version {version.version} ({version.compatibility} compatible).",
            "contentType": "application/json",
            "payload": payload,
        }
        doc["channels"][key] = {
            "address": version.topic,
            "title": version.topic,
            "messages": {key: {"$ref": f"#/components/messages/{key}"}},
        }
        _operations(doc["operations"], key, version.topic, subscriptions)
    return doc


def _key(text: str) -> str:
    """A component or operation key (AsyncAPI allows `[A-Za-z0-9._-]`)."""
    return _COMPONENT_KEY.sub("_", text)


def _operations(
    operations: dict[str, Any], key: str, topic: str, subscriptions: Sequence[SubscriptionLike]
) -> None:
    channel = {"$ref": f"#/channels/{key}"}
    message = [{"$ref": f"#/channels/{key}/messages/{key}"}]
    operations[f"{key}.publish"] = {
        "action": "send",
        "channel": channel,
        "messages": message,
        "summary": f"Publish to {topic}",
        "description": f"`POST /v1/topics/{topic}/events` with `{{payload, idempotencyKey?}}`.",
        "bindings": _HTTP_BINDING,
    }
    operations[f"{key}.cloudevents"] = {
        "action": "send",
        "channel": channel,
        "messages": message,
        "summary": f"Publish to {topic} as a CloudEvent",
        "description": f"`POST /v1/events`, a CloudEvent 1.0 with `type: {topic}` and this "
        "payload as `data` (structured, batched or binary mode).",
        "bindings": _HTTP_BINDING,
    }
    by_kind: dict[str, list[str]] = {}
    for sub in subscriptions:
        if compile_pattern(sub.pattern).matches(topic):
            by_kind.setdefault(sub.kind, []).append(_describe(sub))
    for kind, lines in sorted(by_kind.items()):
        operations[f"{key}.receive.{_key(kind)}"] = {
            "action": "receive",
            "channel": channel,
            "messages": message,
            "summary": f"Receive {topic} through {kind} subscriptions",
            "description": _KIND_TEXT.get(kind, f"Delivered by the {kind} subscriber.")
            + "\n\n"
            + "\n".join(f"- {line}" for line in lines),
        }


def _describe(sub: SubscriptionLike) -> str:
    target = sub.target
    if sub.kind == "queue":
        where = f"queue `{target.get('queue')}`"
    elif sub.kind == "workflow":
        where = f"workflow `{target.get('workflow')}`"
    elif sub.kind == "webhook":
        host = urlsplit(str(target.get("url", ""))).hostname or "?"
        where = f"webhook to `{host}` ({target.get('format', 'ripple')} format)"
    else:
        where = sub.kind
    return f"`{sub.pattern}` → {where}, {sub.status} (subscription `{sub.id}`)"


def _payload(version: SchemaVersion, shared: dict[str, Any]) -> dict[str, Any]:
    """The schema as a payload: `$defs` moved to `shared` under names prefixed with the topic,
    and the references to them rewritten."""
    schema = copy.deepcopy(version.schema)
    prefix = _key(version.topic)
    defs: dict[str, Any] = {}
    for name in ("$defs", "definitions"):
        found = schema.pop(name, None)
        if isinstance(found, dict):
            for def_name, definition in found.items():
                defs[f"#/{name}/{def_name}"] = (f"{prefix}.{_key(def_name)}", definition)
    for name in ("$schema", "$id"):
        schema.pop(name, None)
    renamed = {ref: f"#/components/schemas/{new}" for ref, (new, _) in defs.items()}
    for new, definition in defs.values():
        shared[new] = _rewrite(definition, renamed)
    result: dict[str, Any] = _rewrite(schema, renamed)
    return result


def _rewrite(value: Any, renamed: dict[str, str]) -> Any:
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k == "$ref" and isinstance(v, str):
                out[k] = renamed.get(v, v)
            else:
                out[k] = _rewrite(v, renamed)
        return out
    if isinstance(value, list):
        return [_rewrite(v, renamed) for v in value]
    return value
