"""CloudEvents 1.0 for Ripple events, both ways: reading producers' events (structured, batched
and binary HTTP modes) and writing Ripple's events as CloudEvents (structured and binary); pure.

The CloudEvent's `type` is the topic and its `data` the payload; (`source`, `id`) identify it, so
they become the publish's idempotency key. The other context attributes (`subject`, `time`,
`dataschema`, `datacontenttype`, extensions) are kept with the event as given. Reading checks
what CloudEvents 1.0 requires of each attribute and raises `InvalidInput` whose `field` names
the attribute; it does no I/O and knows no table.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final
from urllib.parse import quote, unquote, urlsplit

from ripple.platform.errors import InvalidInput
from ripple.platform.events.topics import validate_topic

__all__ = [
    "BATCH_MEDIA_TYPE",
    "CLOUDEVENTS_FORMATS",
    "STRUCTURED_MEDIA_TYPE",
    "IncomingEvent",
    "binary_headers",
    "idempotency_key",
    "parse_batch",
    "parse_binary",
    "parse_structured",
    "structured_body",
]

SPEC_VERSION: Final = "1.0"
STRUCTURED_MEDIA_TYPE: Final = "application/cloudevents+json"
BATCH_MEDIA_TYPE: Final = "application/cloudevents-batch+json"
#: Webhook body formats that are CloudEvents (the default "ripple" is Ripple's own envelope).
CLOUDEVENTS_FORMATS: Final = frozenset({"cloudevents", "cloudevents-binary"})
#: Attributes every CloudEvent has.
REQUIRED: Final = ("specversion", "id", "source", "type")
#: Optional attributes CloudEvents 1.0 defines (anything else is an extension).
OPTIONAL: Final = ("datacontenttype", "dataschema", "subject", "time")
#: The extension attribute that carries the topic schema version an outgoing event was
#: validated against (Ripple's envelope calls it `schemaVersion`).
SCHEMA_VERSION_EXTENSION: Final = "schemaversion"
#: Extension attribute names: lower-case ASCII letters and digits (CloudEvents 1.0, 3.1.1).
_NAME: Final = re.compile(r"[a-z0-9]{1,64}")
_INT32: Final = (-(2**31), 2**31 - 1)
#: An RFC 3339 date-time (the `time` attribute).
_RFC3339: Final = re.compile(
    r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt]([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)"
    r"(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)"
)
_KEY_PREFIX: Final = "ce:"
#: What a `ce-*` header value carries unencoded: printable ASCII but space, '"' and '%'.
_HEADER_SAFE: Final = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in ' "%')


@dataclass(frozen=True, slots=True)
class IncomingEvent:
    """A CloudEvent read from a producer, ready to publish."""

    #: The `type` attribute: the topic to publish to.
    topic: str
    #: The `data`: the payload (`{}` when the event has no data).
    payload: Any
    #: Every context attribute as given (`specversion`, `id`, `source`, `type`, optional and
    #: extension attributes), without the data.
    attributes: dict[str, Any]

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(str(self.attributes["source"]), str(self.attributes["id"]))


def idempotency_key(source: str, event_id: str) -> str:
    """The publish idempotency key of the CloudEvent (`source`, `id`): a producer's retry of the
    same event is the same publish. Hashed, so any pair fits the key's length."""
    digest = hashlib.sha256(f"{source}\x00{event_id}".encode()).hexdigest()
    return _KEY_PREFIX + digest


#: `validate_topic`, remembered for the topics that passed (producers send a few types, often).
_valid_topic: Final = functools.lru_cache(maxsize=4096)(validate_topic)


def _refuse(attribute: str, message: str) -> InvalidInput:
    return InvalidInput(f"CloudEvent attribute {attribute!r} {message}", field=attribute)


def _check_string(name: str, value: Any, *, required: bool) -> None:
    if not isinstance(value, str):
        kind = "is required" if value is None and required else "must be a string"
        raise _refuse(name, f"{kind} (CloudEvents 1.0)")
    if required and not value:
        raise _refuse(name, "must not be empty (CloudEvents 1.0)")
    if "\x00" in value:
        raise _refuse(name, "contains U+0000, which Ripple cannot store: remove it")


def _check_attributes(attributes: dict[str, Any]) -> None:
    """Raise `InvalidInput` naming the first attribute CloudEvents 1.0 does not allow."""
    spec = attributes.get("specversion")
    if spec is None:
        raise _refuse("specversion", "is required: send '1.0'")
    if spec != SPEC_VERSION:
        raise _refuse("specversion", f"is {spec!r}; Ripple reads CloudEvents '1.0' only")
    for name in REQUIRED[1:]:
        _check_string(name, attributes.get(name), required=True)
    try:
        _valid_topic(attributes["type"])
    except InvalidInput as exc:
        raise _refuse("type", f"names the topic and is not a valid one: {exc.message}") from exc
    for name in OPTIONAL:
        if name in attributes:
            _check_string(name, attributes[name], required=False)
    if "dataschema" in attributes and not urlsplit(attributes["dataschema"]).scheme:
        raise _refuse("dataschema", "must be an absolute URI (CloudEvents 1.0)")
    if "time" in attributes and not _RFC3339.fullmatch(attributes["time"]):
        raise _refuse(
            "time", f"must be an RFC 3339 timestamp with an offset, got {attributes['time']!r}"
        )
    for name, value in attributes.items():
        if name not in REQUIRED and name not in OPTIONAL:
            _check_extension(name, value)


def _check_extension(name: str, value: Any) -> None:
    if not _NAME.fullmatch(name):
        raise _refuse(name, "is not a valid extension name: use lower-case a-z and 0-9")
    if isinstance(value, str):
        _check_string(name, value, required=False)
    elif not isinstance(value, bool) and not _is_int32(value):
        raise _refuse(name, "must be a string, a boolean or a 32-bit integer (CloudEvents 1.0)")


def _is_int32(value: Any) -> bool:
    """A 32-bit integer (JSON's `300.0` is the integer 300 too)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return isinstance(value, int) and _INT32[0] <= value <= _INT32[1]


def parse_structured(doc: Any) -> IncomingEvent:
    """The event of a structured-mode body (`application/cloudevents+json`), parsed JSON."""
    if not isinstance(doc, dict):
        raise InvalidInput(
            "a structured CloudEvent is a JSON object with specversion, id, source and type",
            field="specversion",
        )
    if "data_base64" in doc:
        raise _refuse("data_base64", "is not accepted: Ripple event data is JSON, send `data`")
    attributes = {k: v for k, v in doc.items() if k != "data"}
    _check_attributes(attributes)
    data = doc.get("data")
    return IncomingEvent(attributes["type"], {} if data is None else data, attributes)


def parse_batch(doc: Any) -> list[IncomingEvent | InvalidInput]:
    """Each event of a batched-mode body (`application/cloudevents-batch+json`), in order: the
    event, or why it is refused (each event stands alone)."""
    if not isinstance(doc, list) or not all(isinstance(item, dict) for item in doc):
        raise InvalidInput(
            "a CloudEvents batch is a JSON array of structured events (JSON objects)",
            field="specversion",
        )
    out: list[IncomingEvent | InvalidInput] = []
    for item in doc:
        try:
            out.append(parse_structured(item))
        except InvalidInput as exc:
            out.append(exc)
    return out


def parse_binary(headers: Mapping[str, str], content_type: str | None, data: Any) -> IncomingEvent:
    """The event of a binary-mode request: `ce-*` headers (lower-case names, values as sent,
    percent-encoded), its `Content-Type` and its body parsed as JSON (None when empty)."""
    attributes: dict[str, Any] = {}
    for name, value in headers.items():
        if name.startswith("ce-"):
            attributes[name[3:]] = unquote(value)
    if content_type is not None:
        attributes["datacontenttype"] = content_type
    _check_attributes(attributes)
    return IncomingEvent(attributes["type"], {} if data is None else data, attributes)


def _time(event_time: datetime) -> str:
    return event_time.astimezone(UTC).isoformat().replace("+00:00", "Z")


def structured_body(
    event_id: str,
    topic: str,
    event_time: datetime,
    payload_json: str,
    source: str,
    schema_version: int | None = None,
) -> bytes:
    """A structured-mode CloudEvent (`application/cloudevents+json`) of a Ripple event, with
    the extension attribute `schemaversion` when the event was validated against a topic schema.

    `payload_json` is the payload's JSON text as stored, spliced in without decoding it.
    """
    attributes: dict[str, str | int] = {
        "specversion": SPEC_VERSION,
        "id": event_id,
        "source": source,
        "type": topic,
        "time": _time(event_time),
        "datacontenttype": "application/json",
    }
    if schema_version is not None:
        attributes[SCHEMA_VERSION_EXTENSION] = int(schema_version)
    head = json.dumps(attributes, ensure_ascii=False, separators=(",", ":"))
    return f'{head[:-1]},"data":{payload_json}}}'.encode()


def binary_headers(
    event_id: str,
    topic: str,
    event_time: datetime,
    source: str,
    schema_version: int | None = None,
) -> dict[str, str]:
    """The `ce-*` and `content-type` headers of a binary-mode CloudEvent (body = the payload),
    with `ce-schemaversion` when the event was validated against a topic schema."""
    headers = {
        "content-type": "application/json",
        "ce-specversion": SPEC_VERSION,
        "ce-id": event_id,
        "ce-source": quote(source, safe=_HEADER_SAFE),
        "ce-type": topic,
        "ce-time": _time(event_time),
    }
    if schema_version is not None:
        headers[f"ce-{SCHEMA_VERSION_EXTENSION}"] = str(int(schema_version))
    return headers
