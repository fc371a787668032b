"""CloudEvents 1.0 reading and writing (no I/O), checked against the official `cloudevents` SDK."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from cloudevents.core.bindings import http as ce_http
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent
from cloudevents.v1 import conversion as v1_conversion
from cloudevents.v1.http import CloudEvent as V1CloudEvent
from cloudevents.v1.http import from_http as v1_from_http

from ripple.platform.errors import InvalidInput
from ripple.platform.events import cloudevents as ce

EVENT: dict[str, Any] = {
    "specversion": "1.0",
    "id": "A-1",
    "source": "https://shop.example.com/signup",
    "type": "user.signup",
}


def _structured(event: Any) -> Any:
    message = ce_http.to_structured(event, JSONFormat())
    return json.loads(message.body)


def test_cloudevents__sdk_structured_event_is_read_with_every_attribute() -> None:
    event = CloudEvent(
        attributes={
            **EVENT,
            "subject": "42",
            "dataschema": "https://schemas.example.com/signup",
            "datacontenttype": "application/json",
            "tenant": "acme",
            "priority": 3,
        },
        data={"userId": 42},
    )
    read = ce.parse_structured(_structured(event))
    assert read.topic == "user.signup"
    assert read.payload == {"userId": 42}
    assert read.attributes["subject"] == "42"
    assert read.attributes["tenant"] == "acme"
    assert read.attributes["priority"] == 3
    assert "data" not in read.attributes
    assert read.attributes["time"].endswith("Z")  # the SDK adds `time`


def test_cloudevents__sdk_binary_event_is_read_from_headers_and_body() -> None:
    event = CloudEvent(attributes={**EVENT, "source": "/a b%c", "subject": "x"}, data={"a": 1})
    message = ce_http.to_binary(event, JSONFormat())
    headers = {k.lower(): v for k, v in message.headers.items()}
    read = ce.parse_binary(headers, headers.get("content-type"), json.loads(message.body))
    assert read.attributes["source"] == "/a b%c"  # percent-decoded
    assert read.payload == {"a": 1}
    assert read.idempotency_key == ce.idempotency_key("/a b%c", "A-1")


def test_cloudevents__v1_sdk_events_are_read_too() -> None:
    event = V1CloudEvent({"type": "user.signup", "source": "/x"}, {"a": 1})
    headers, body = v1_conversion.to_binary(event)
    read = ce.parse_binary(dict(headers), None, json.loads(body))
    assert read.topic == "user.signup"
    headers, body = v1_conversion.to_structured(event)
    assert ce.parse_structured(json.loads(body)).payload == {"a": 1}


@pytest.mark.parametrize(
    ("change", "attribute"),
    [
        ({"specversion": None}, "specversion"),
        ({"specversion": "0.3"}, "specversion"),
        ({"id": None}, "id"),
        ({"id": ""}, "id"),
        ({"source": None}, "source"),
        ({"source": 7}, "source"),
        ({"type": None}, "type"),
        ({"type": "Not A Topic"}, "type"),
        ({"type": "user.*"}, "type"),
        ({"time": "yesterday"}, "time"),
        ({"time": "2026-01-01T00:00:00"}, "time"),
        ({"dataschema": "relative/path"}, "dataschema"),
        ({"subject": 5}, "subject"),
        ({"Bad_Name": "x"}, "Bad_Name"),
        ({"ext": {"nested": 1}}, "ext"),
        ({"ext": 2**40}, "ext"),
        ({"ext": None}, "ext"),
        ({"subject": "a\x00b"}, "subject"),
        ({"data_base64": "eyJ9"}, "data_base64"),
    ],
)
def test_cloudevents__invalid_attribute_is_refused_naming_it(
    change: dict[str, Any], attribute: str
) -> None:
    doc = {**EVENT, **change}
    doc = {k: v for k, v in doc.items() if not (v is None and k in ce.REQUIRED)}
    with pytest.raises(InvalidInput, match=attribute) as caught:
        ce.parse_structured(doc)
    assert caught.value.field == attribute


def test_cloudevents__absent_data_is_an_empty_object() -> None:
    assert ce.parse_structured(dict(EVENT)).payload == {}


def test_cloudevents__batch_answers_each_event_on_its_own() -> None:
    good = {**EVENT, "data": 1}
    read = ce.parse_batch([good, {**EVENT, "specversion": "2.0"}, good])
    assert [type(r).__name__ for r in read] == ["IncomingEvent", "InvalidInput", "IncomingEvent"]
    with pytest.raises(InvalidInput):
        ce.parse_batch({"not": "a list"})
    with pytest.raises(InvalidInput):
        ce.parse_batch([good, 3])


def test_cloudevents__idempotency_key_is_per_source_and_id() -> None:
    assert ce.idempotency_key("a", "b c") != ce.idempotency_key("a b", "c")
    assert len(ce.idempotency_key("s" * 5000, "i" * 5000)) < 255


def test_cloudevents__structured_egress_parses_in_both_sdks() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    body = ce.structured_body("e-1", "user.signup", at, '{"name":"Zoë"}', "https://ripple.test")
    headers = {"content-type": ce.STRUCTURED_MEDIA_TYPE}
    event = ce_http.from_http(ce_http.HTTPMessage(headers, body), JSONFormat())
    assert event.get_id() == "e-1"
    assert event.get_type() == "user.signup"
    assert event.get_source() == "https://ripple.test"
    assert event.get_data() == {"name": "Zoë"}
    assert event.get_time() == at
    old = v1_from_http(headers, body)
    assert (old["id"], old.data) == ("e-1", {"name": "Zoë"})


def test_cloudevents__binary_egress_parses_in_both_sdks() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    headers = ce.binary_headers("e-2", "user.signup", at, "urn:ripple test")
    body = b'{"userId":42}'
    event = ce_http.from_http(ce_http.HTTPMessage(headers, body), JSONFormat())
    assert (event.get_id(), event.get_source()) == ("e-2", "urn:ripple test")
    assert event.get_data() == {"userId": 42}
    old = v1_from_http(headers, body)
    assert (old["type"], old.data) == ("user.signup", {"userId": 42})


def test_cloudevents__egress_carries_the_schema_version_as_an_extension() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    body = ce.structured_body("e-3", "user.signup", at, '{"n":1}', "urn:r", schema_version=3)
    structured = v1_from_http({"content-type": ce.STRUCTURED_MEDIA_TYPE}, body)
    assert structured["schemaversion"] == 3
    headers = ce.binary_headers("e-4", "user.signup", at, "urn:r", schema_version=3)
    binary = v1_from_http(headers, b'{"n":1}')
    assert binary["schemaversion"] == "3"  # binary mode: every attribute is a header string
    # without a schema, no extension at all
    assert "schemaversion" not in v1_from_http(
        {"content-type": ce.STRUCTURED_MEDIA_TYPE},
        ce.structured_body("e-5", "t", at, "{}", "urn:r"),
    )
    assert "ce-schemaversion" not in ce.binary_headers("e-6", "t", at, "urn:r")
