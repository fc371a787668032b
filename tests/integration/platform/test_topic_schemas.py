"""Typed topics on a real database: the registry, validation on every publish path, the schema
version an event carries, matches checked against the contract, and the validator cache."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ConfigDict

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.errors import InvalidInput, SchemaIncompatible
from ripple.platform.events import event_store
from ripple.subscribers import QueueTarget
from ripple.workflows import RunStatus, Worker, WorkflowContext, workflow
from tests.helpers import assert_eventually


class UserSignup(BaseModel):
    model_config = ConfigDict(extra="forbid")

    userId: int
    email: str


class UserSignupV2(BaseModel):
    model_config = ConfigDict(extra="forbid")

    userId: int
    email: str
    plan: str | None = None


class UserSignupRequiredPlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    userId: int
    email: str
    plan: str


async def count_events(client: Client, topic: str) -> int:
    async with client.pool.acquire() as conn:
        return int(
            await conn.fetchval("SELECT count(*) FROM ripple_events WHERE topic = $1", topic)
        )


async def audit_rows(client: Client, action: str) -> list[Any]:
    async with client.pool.acquire() as conn:
        return list(
            await conn.fetch(
                "SELECT target, details FROM ripple_audit WHERE action = $1 ORDER BY at", action
            )
        )


# -- the registry -----------------------------------------------------------------------------


async def test_register_schema__versions_are_numbered_and_registration_is_idempotent(
    client: Client,
) -> None:
    v1 = await client.topics.register_schema("user.signup", UserSignup)
    assert (v1.topic, v1.version, v1.compatibility) == ("user.signup", 1, "backward")
    assert v1.schema == UserSignup.model_json_schema()
    again = await client.topics.register_schema("user.signup", UserSignup.model_json_schema())
    assert (again.version, again.created_at) == (1, v1.created_at)

    v2 = await client.topics.register_schema("user.signup", UserSignupV2)
    assert v2.version == 2
    assert [v.version for v in await client.topics.list_schemas("user.signup")] == [1, 2]
    latest = await client.topics.get_schema("user.signup")
    assert latest is not None
    assert latest.version == 2
    first = await client.topics.get_schema("user.signup", version=1)
    assert first is not None
    assert first.schema == v1.schema
    assert await client.topics.get_schema("user.other") is None
    assert [tuple(r) for r in await audit_rows(client, "topic.schema.register")] == [
        ("user.signup", {"version": 1}),
        ("user.signup", {"version": 2}),
    ]


async def test_register_schema__an_incompatible_schema_is_refused_with_its_problems(
    client: Client,
) -> None:
    await client.topics.register_schema("user.signup", UserSignup)
    report = await client.topics.check_schema("user.signup", UserSignupRequiredPlan)
    assert not report.compatible
    assert report.problems == [
        "/plan: the new schema requires this property; version 1 did not have it"
    ]
    with pytest.raises(SchemaIncompatible) as refused:
        await client.topics.register_schema("user.signup", UserSignupRequiredPlan)
    assert isinstance(refused.value, ValueError)
    assert refused.value.problems == report.problems
    assert [v.version for v in await client.topics.list_schemas("user.signup")] == [1]
    assert len(await audit_rows(client, "topic.schema.register")) == 1

    await client.topics.set_compatibility("user.signup", "none")
    assert (await client.topics.check_schema("user.signup", UserSignupRequiredPlan)).compatible
    v2 = await client.topics.register_schema("user.signup", UserSignupRequiredPlan)
    assert (v2.version, v2.compatibility) == (2, "none")


async def test_register_schema__refuses_what_is_not_a_schema(client: Client) -> None:
    with pytest.raises(InvalidInput, match="not a valid JSON Schema"):
        await client.topics.register_schema("user.signup", {"type": "integr"})
    with pytest.raises(InvalidInput, match="pydantic model class or a JSON Schema"):
        await client.topics.register_schema("user.signup", "UserSignup")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="unknown compatibility"):
        await client.topics.register_schema("user.signup", UserSignup, "sideways")  # type: ignore[arg-type]
    assert await client.topics.list_schemas("user.signup") == []


async def test_register_schema__concurrent_registrations_take_consecutive_versions(
    client: Client,
) -> None:
    await client.topics.set_compatibility("load.test", "none")
    schemas = [
        {"type": "object", "properties": {f"field{i}": {"type": "integer"}}} for i in range(8)
    ]
    versions = await asyncio.gather(
        *(client.topics.register_schema("load.test", s) for s in schemas)
    )
    assert sorted(v.version for v in versions) == list(range(1, 9))


async def test_register_schema__open_model_addition_is_judged_against_stored_events(
    client: Client,
) -> None:
    class Open(BaseModel):
        userId: int

    class OpenWithPlan(BaseModel):
        userId: int
        plan: str | None = None

    class OpenWithTier(BaseModel):
        userId: int
        tier: str | None = None

    await client.topics.register_schema("user.open", Open)
    # An open model let publishers send a `tier` nobody declared.
    await client.publish("user.open", {"userId": 1, "tier": 7})
    assert (await client.topics.register_schema("user.open", OpenWithPlan)).version == 2
    with pytest.raises(SchemaIncompatible) as refused:
        await client.topics.register_schema("user.open", OpenWithTier)
    assert refused.value.problems[0].startswith("/tier: an earlier version is an open model")


# -- validation on every publish path ----------------------------------------------------------


async def test_publish__an_invalid_payload_is_refused_and_nothing_is_written(
    client: Client,
) -> None:
    await client.subscribe("user.*", QueueTarget("signups"))
    await client.topics.register_schema("user.signup", UserSignup)
    with pytest.raises(InvalidInput) as refused:
        await client.publish("user.signup", {"userId": "x", "email": "a@b.c"})
    assert "/userId: " in str(refused.value)
    assert "integer" in str(refused.value)
    with pytest.raises(InvalidInput, match=r"/: .*email"):
        await client.publish("user.signup", {"userId": 1})
    assert await count_events(client, "user.signup") == 0
    assert await client.queues.receive("signups", max_messages=10) == []


async def test_publish__a_model_instance_is_accepted_and_the_event_carries_its_version(
    client: Client,
) -> None:
    await client.subscribe("user.*", QueueTarget("signups"))
    await client.topics.register_schema("user.signup", UserSignup)
    await client.topics.register_schema("user.signup", UserSignupV2)
    result = await client.publish("user.signup", UserSignup(userId=1, email="a@b.c"))
    (message,) = await client.queues.receive("signups", max_messages=10)
    assert message.body == {"userId": 1, "email": "a@b.c"}
    assert message.headers["schemaVersion"] == 2
    async with client.pool.acquire() as conn:
        stored = await event_store.get_event(conn, result.event_id)
    assert stored is not None
    assert stored.schema_version == 2

    # A topic without a schema: no version anywhere.
    await client.publish("user.other", {"anything": True})
    (plain,) = await client.queues.receive("signups", max_messages=10)
    assert "schemaVersion" not in plain.headers


async def test_rest__schema_routes_and_publish_validation(client: Client) -> None:
    from tests.helpers import rest_client

    schema = UserSignup.model_json_schema()
    async with rest_client(client) as http:
        created = await http.put("/v1/topics/user.signup/schema", json={"schema": schema})
        assert created.status_code == 201
        assert created.json() == {"topic": "user.signup", "version": 1, "compatibility": "backward"}
        same = await http.put("/v1/topics/user.signup/schema", json={"schema": schema})
        assert (same.status_code, same.json()["version"]) == (200, 1)

        breaking = UserSignupRequiredPlan.model_json_schema()
        check = await http.post("/v1/topics/user.signup/schema/check", json={"schema": breaking})
        assert check.status_code == 200
        assert check.json()["compatible"] is False
        refused = await http.put("/v1/topics/user.signup/schema", json={"schema": breaking})
        assert refused.status_code == 409
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["problems"] == check.json()["problems"]

        got = await http.get("/v1/topics/user.signup/schema", params={"version": 1})
        assert got.status_code == 200
        assert got.json()["schema"] == schema
        assert (await http.get("/v1/topics/user.signup/schema?version=9")).status_code == 404
        listed = await http.get("/v1/topics/user.signup/schemas")
        assert [v["version"] for v in listed.json()] == [1]
        mode = await http.put(
            "/v1/topics/user.signup/compatibility", json={"compatibility": "full"}
        )
        assert mode.status_code == 200
        assert (await client.topics.get_schema("user.signup")).compatibility == "full"  # type: ignore[union-attr]

        bad = await http.post("/v1/topics/user.signup/events", json={"payload": {"userId": "x"}})
        assert bad.status_code == 422
        assert "/userId: " in bad.json()["detail"]
        good = await http.post(
            "/v1/topics/user.signup/events", json={"payload": {"userId": 1, "email": "a@b.c"}}
        )
        assert good.status_code == 202
    assert await count_events(client, "user.signup") == 1


async def test_schedule__a_payload_that_breaks_the_schema_is_refused(client: Client) -> None:
    await client.topics.register_schema("user.signup", UserSignup)
    with pytest.raises(InvalidInput, match="/userId: "):
        await client.schedules.create(
            "bad", topic="user.signup", every=60, payload={"userId": "x", "email": "a"}
        )
    assert await client.schedules.get("bad") is None

    # A schedule created before the schema: its tick is refused, nothing is published.
    await client.schedules.create("old", topic="user.other", every=60, payload={"userId": "x"})
    await client.topics.register_schema("user.other", UserSignup)
    with pytest.raises(InvalidInput, match="/userId: "):
        await client.schedules.trigger("old")
    assert await count_events(client, "user.other") == 0


# -- matches against the contract ---------------------------------------------------------------


async def test_signal_matching__payload_is_validated_and_a_typo_is_named(client: Client) -> None:
    await client.topics.register_schema("user.verified", UserSignupV2)
    with pytest.raises(InvalidInput, match="/userId: "):
        await client.signal_matching("user.verified", {"userId": "x", "email": "a@b.c"})
    await client.topics.register_schema(
        "user.opened", {"type": "object", "properties": {"userId": {"type": "integer"}}}
    )
    with pytest.raises(InvalidInput, match="/userid"):
        await client.signal_matching("user.opened", {"userid": 1})
    assert await client.signal_matching("user.opened", {"userId": 1}) == 0


async def test_subscribe__a_filter_naming_an_undeclared_property_is_refused(
    client: Client,
) -> None:
    await client.topics.register_schema("user.signup", UserSignupV2)
    with pytest.raises(InvalidInput, match="/pln"):
        await client.subscribe("user.signup", QueueTarget("pro"), {"pln": "pro"})
    with pytest.raises(InvalidInput, match="/pln"):
        await client.subscribe("user.*", QueueTarget("pro"), {"pln": "pro"})
    assert await client.list_subscriptions() == []
    await client.subscribe("user.*", QueueTarget("pro"), {"plan": "pro"})


@workflow(name="await-signup")
async def await_signup(ctx: WorkflowContext, user: int) -> Any:
    return await ctx.step.wait_for_event(
        "signed-up", event="user.signup", match={"userid": user}, timeout=60
    )


async def test_wait_for_event__a_typo_in_the_match_fails_the_run_naming_the_path(
    client: Client,
) -> None:
    await client.topics.register_schema("user.signup", UserSignup)
    async with Worker(client, [await_signup], webhooks=False, sweeper=False):
        handle = await client.start(await_signup, 7)

        async def failed() -> Any:
            run = await client.get_run(handle.run_id)
            return run if run is not None and run.status == RunStatus.FAILED else None

        run = await assert_eventually(failed)
    assert "/userid" in str(run.error)
    assert "InvalidInput" in str(run.error)


# -- the validator cache across processes --------------------------------------------------------


async def test_cache__a_registration_reaches_another_client_through_the_wake_layer(
    settings: Settings,
) -> None:
    slow_poll = settings.model_copy(update={"poll_interval": 3600.0})
    async with Client(settings=slow_poll) as publisher, Client(settings=settings) as registrar:
        await publisher.publish("user.signup", {"userId": "x"})  # no schema yet: cached as such
        await registrar.topics.register_schema("user.signup", UserSignup)

        async def refused() -> bool:
            try:
                await publisher.publish("user.signup", {"userId": "x"})
            except InvalidInput:
                return True
            return False

        await assert_eventually(refused)


async def test_cache__without_redis_the_poll_fallback_picks_a_registration_up(
    settings: Settings,
) -> None:
    no_redis = settings.model_copy(update={"redis_url": None, "poll_interval": 0.2})
    async with Client(settings=no_redis) as publisher, Client(settings=no_redis) as registrar:
        await publisher.publish("user.signup", {"userId": "x"})
        await registrar.topics.register_schema("user.signup", UserSignup)

        async def refused() -> bool:
            try:
                await publisher.publish("user.signup", {"userId": "x"})
            except InvalidInput:
                return True
            return False

        await assert_eventually(refused)


async def test_webhook__the_body_of_a_validated_event_carries_its_schema_version(
    settings: Settings,
) -> None:
    from standardwebhooks.webhooks import Webhook

    from ripple.platform.core.wake import NullWaker
    from ripple.subscribers import WebhookTarget
    from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher
    from tests.integration.subscribers.webhook_sink import Sink

    hook_settings = settings.model_copy(update={"webhook_allowed_networks": ["127.0.0.0/8"]})
    async with Client(settings=hook_settings) as client, Sink() as sink:
        target = WebhookTarget(sink.url())
        await client.subscribe("user.signup", target)
        await client.topics.register_schema("user.signup", UserSignup)
        await client.publish("user.signup", {"userId": 1, "email": "a@b.c"})
        sent = await WebhookDispatcher(client.pool, NullWaker(), hook_settings).run_until_idle()
        assert sent == 1
    body = Webhook(target.secret).verify(sink.received[0].body, sink.received[0].headers)
    assert body["schemaVersion"] == 1
    assert body["data"] == {"userId": 1, "email": "a@b.c"}


async def test_ui__the_event_page_shows_the_schema_version(client: Client) -> None:
    import httpx

    from ripple.platform.api.app import create_app

    await client.topics.register_schema("user.signup", UserSignup)
    typed = await client.publish("user.signup", {"userId": 1, "email": "a@b.c"})
    plain = await client.publish("user.other", {"n": 1})
    transport = httpx.ASGITransport(app=create_app(client))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as ui:
        typed_page = await ui.get(f"/ui/events/{typed.event_id}")
        plain_page = await ui.get(f"/ui/events/{plain.event_id}")
    assert '<td id="schema-version">1</td>' in typed_page.text
    assert '<td id="schema-version">none</td>' in plain_page.text


async def test_register_schema__transitive_modes_judge_every_earlier_version(
    client: Client,
) -> None:
    def user_id(kind: str) -> dict[str, Any]:
        return {
            "type": "object",
            "properties": {"userId": {"type": kind}},
            "required": ["userId"],
            "additionalProperties": False,
        }

    await client.topics.register_schema("user.moved", user_id("string"))
    await client.topics.register_schema("user.moved", user_id("integer"), "none")
    await client.topics.set_compatibility("user.moved", "backward_transitive")
    with pytest.raises(SchemaIncompatible) as refused:
        await client.topics.register_schema("user.moved", user_id("number"))
    assert refused.value.problems == [
        "/userId: the new schema reads number, but version 1 wrote string"
    ]
    v3 = await client.topics.register_schema("user.moved", user_id("number"), "backward")
    assert (v3.version, v3.compatibility) == (3, "backward")


async def test_explain__validates_against_the_schema_as_publish_does(
    client: Client, http: httpx.AsyncClient
) -> None:
    await client.subscribe("user.*", QueueTarget("signups"))
    await client.topics.register_schema("user.signup", UserSignup)
    explained = await client.explain("user.signup", {"userId": 1, "email": "a@b.c"})
    assert explained.schema_version == 1
    assert [v.pattern for v in explained.matched] == ["user.*"]
    with pytest.raises(InvalidInput, match="/userId"):
        await client.explain("user.signup", {"userId": "x", "email": "a@b.c"})
    assert (await client.explain("other.topic", {"any": 1})).schema_version is None

    ok = await http.get(
        "/v1/topics/user.signup/explain", params={"payload": '{"userId":1,"email":"e"}'}
    )
    assert ok.status_code == 200
    assert ok.json()["schemaVersion"] == 1
    bad = await http.get("/v1/topics/user.signup/explain", params={"payload": '{"userId":"x"}'})
    assert bad.status_code == 422
    assert "/userId" in bad.text
