"""`POST /v1/events`: CloudEvents produced by the official SDK, in structured, binary and batched
mode, published through the one publish path (fan-out, idempotency, attributes kept)."""

from __future__ import annotations

import json
from typing import Any

import httpx
from cloudevents.core.bindings import http as ce_http
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent

from ripple.platform.client import Client
from ripple.platform.events.event_store import get_event
from ripple.subscribers import QueueTarget

BATCH = "application/cloudevents-batch+json"


def _event(event_id: str = "A-1", topic: str = "user.signup", **extra: Any) -> CloudEvent:
    attributes = {"type": topic, "source": "https://shop.example.com", "id": event_id, **extra}
    return CloudEvent(attributes=attributes, data=extra.pop("data", {"userId": 42}))


async def _post(http: httpx.AsyncClient, message: ce_http.HTTPMessage) -> httpx.Response:
    return await http.post("/v1/events", content=message.body, headers=message.headers)


async def _count_events(client: Client) -> int:
    return int(await client.pool.fetchval("SELECT count(*) FROM ripple_events"))


async def test_cloudevents_ingest__structured_event_is_published_and_kept(
    client: Client, http: httpx.AsyncClient
) -> None:
    await client.subscribe("user.*", QueueTarget("users"))
    event = _event(subject="42", dataschema="https://schemas.example.com/s", tenant="acme")
    answer = await _post(http, ce_http.to_structured(event, JSONFormat()))
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["deliveries"] == 1
    (message,) = await client.queues.receive("users")
    assert message.body == {"userId": 42}
    async with client.pool.acquire() as conn:
        stored = await get_event(conn, body["eventId"])
    assert stored is not None
    assert stored.topic == "user.signup"
    assert stored.cloudevent is not None
    assert stored.cloudevent["subject"] == "42"
    assert stored.cloudevent["tenant"] == "acme"
    assert stored.cloudevent["dataschema"] == "https://schemas.example.com/s"
    assert stored.cloudevent["source"] == "https://shop.example.com"


async def test_cloudevents_ingest__binary_event_and_its_retry_are_one_event(
    client: Client, http: httpx.AsyncClient
) -> None:
    await client.subscribe("user.*", QueueTarget("users"))
    message = ce_http.to_binary(_event(), JSONFormat())
    first = await _post(http, message)
    retry = await _post(http, message)
    assert first.status_code == retry.status_code == 202, first.text
    assert retry.json()["eventId"] == first.json()["eventId"]
    assert retry.json()["deliveries"] == 0
    # The same id from the structured mode is the same event too; another source is not.
    again = await _post(http, ce_http.to_structured(_event(), JSONFormat()))
    assert again.json()["eventId"] == first.json()["eventId"]
    other = CloudEvent(
        attributes={"type": "user.signup", "source": "/other", "id": "A-1"}, data={"userId": 1}
    )
    elsewhere = await _post(http, ce_http.to_binary(other, JSONFormat()))
    assert elsewhere.json()["eventId"] != first.json()["eventId"]
    assert [m.body for m in await client.queues.receive("users", max_messages=10)] == [
        {"userId": 42},
        {"userId": 1},
    ]


async def test_cloudevents_ingest__batch_answers_each_event_in_order(
    client: Client, http: httpx.AsyncClient
) -> None:
    await client.subscribe("#", QueueTarget("all"))
    events = [
        json.loads(ce_http.to_structured(_event(f"B-{i}"), JSONFormat()).body) for i in range(3)
    ]
    events.insert(1, {**events[0], "specversion": "0.3", "id": "bad"})
    events.append(dict(events[0]))  # a repeat of the first, inside the batch
    answer = await http.post(
        "/v1/events", content=json.dumps(events), headers={"content-type": BATCH}
    )
    assert answer.status_code == 202, answer.text
    results = answer.json()["results"]
    assert len(results) == 5
    assert results[1]["status"] == 400
    assert "specversion" in results[1]["detail"]
    assert [r["deliveries"] for r in results if "eventId" in r] == [1, 1, 1, 0]
    assert results[4]["eventId"] == results[0]["eventId"]
    assert await _count_events(client) == 3


async def test_cloudevents_ingest__invalid_attributes_are_400_naming_them_and_write_nothing(
    client: Client, http: httpx.AsyncClient
) -> None:
    good = json.loads(ce_http.to_structured(_event(), JSONFormat()).body)
    cases = [
        ({k: v for k, v in good.items() if k != "source"}, "source"),
        ({**good, "specversion": "0.3"}, "specversion"),
        ({**good, "type": "No Topic"}, "type"),
        ({**good, "time": "noon"}, "time"),
    ]
    for doc, attribute in cases:
        answer = await http.post(
            "/v1/events",
            content=json.dumps(doc),
            headers={"content-type": "application/cloudevents+json"},
        )
        assert answer.status_code == 400, (attribute, answer.text)
        assert answer.headers["content-type"] == "application/problem+json"
        problem = answer.json()
        assert attribute in problem["detail"]
        assert problem["errors"][0]["loc"] == ["cloudevent", attribute]
    binary = ce_http.to_binary(_event(), JSONFormat())
    headers = {k: v for k, v in binary.headers.items() if k != "ce-id"}
    answer = await http.post("/v1/events", content=binary.body, headers=headers)
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["loc"] == ["cloudevent", "id"]
    plain = await http.post("/v1/events", json={"hello": 1})
    assert plain.status_code == 400
    assert "ce-specversion" in plain.json()["detail"]
    assert await _count_events(client) == 0


async def test_cloudevents_ingest__event_trace_shows_the_attributes(
    client: Client, http: httpx.AsyncClient
) -> None:
    event = _event(subject="order-7", tenant="acme")
    answer = await _post(http, ce_http.to_binary(event, JSONFormat()))
    event_id = answer.json()["eventId"]
    # Loopback without tokens: the dashboard needs no login.
    page = await http.get(f"/ui/events/{event_id}", headers={"host": "127.0.0.1"})
    assert page.status_code == 200, page.text
    assert 'id="cloudevent"' in page.text
    for text in ("subject", "order-7", "tenant", "acme", "https://shop.example.com"):
        assert text in page.text
    catalogue = await http.get("/ui/catalogue", headers={"host": "127.0.0.1"})
    assert "user.signup" in catalogue.text


async def test_cloudevents_ingest__topic_schema_refuses_bad_data_in_every_mode(
    client: Client, http: httpx.AsyncClient
) -> None:
    schema = {
        "type": "object",
        "properties": {"userId": {"type": "integer"}},
        "required": ["userId"],
    }
    await client.topics.register_schema("user.signup", schema)
    await client.subscribe("user.*", QueueTarget("users"))

    def event(event_id: str, user_id: object) -> CloudEvent:
        attributes = {"type": "user.signup", "source": "/shop", "id": event_id}
        return CloudEvent(attributes=attributes, data={"userId": user_id})

    structured = await _post(http, ce_http.to_structured(event("B-1", "x"), JSONFormat()))
    assert structured.status_code == 422, structured.text
    assert "/userId" in structured.text
    binary = await _post(http, ce_http.to_binary(event("B-2", "x"), JSONFormat()))
    assert binary.status_code == 422, binary.text
    assert "/userId" in binary.text

    good = JSONFormat().write(event("B-3", 42))
    wrong = JSONFormat().write(event("B-4", "x"))
    batch = b"[" + good + b"," + wrong + b"]"
    answer = await http.post("/v1/events", content=batch, headers={"content-type": BATCH})
    assert answer.status_code == 202, answer.text
    ok, refused = answer.json()["results"]
    assert "eventId" in ok
    assert refused["status"] == 422
    assert "/userId" in refused["detail"]

    # Only the valid event was written, and only it reached the subscriber.
    assert await _count_events(client) == 1
    assert [m.body for m in await client.queues.receive("users", max_messages=10)] == [
        {"userId": 42}
    ]
