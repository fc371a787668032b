"""Webhook delivery against real local sinks: signatures, retries, outcome rules, redrive."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool
from ripple.platform.core.wake import NullWaker
from ripple.platform.errors import Conflict, InvalidInput, NotFound
from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher
from ripple.subscribers.webhooks.webhook import Deliveries, WebhookKind
from ripple.workflows.authoring.retry import RetryPolicy
from tests.integration.subscribers.conftest import Hooks
from tests.integration.subscribers.webhook_sink import Received, Reply, Sink, signal_on


def dispatcher(pool: Pool, settings: Settings) -> WebhookDispatcher:
    return WebhookDispatcher(pool, NullWaker(), settings)


async def test_webhook_dispatcher__posts_signed_standard_webhook(
    ops: Deliveries, pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    async with Sink() as sink:
        sub = await hooks.subscribe(sink.url())
        event = await hooks.publish([sub], payload={"userId": 42, "name": "Zoë"})
        assert await dispatcher(pool, hook_settings).run_until_idle() == 1

    req = sink.received[0]
    assert req.method == "POST"
    assert req.path == "/hook"
    assert req.headers["content-type"] == "application/json"
    body = Webhook(sub.target["secret"]).verify(req.body, req.headers)
    assert body["type"] == "user.signup"
    assert body["data"] == {"userId": 42, "name": "Zoë"}
    assert datetime.fromisoformat(body["timestamp"]) == event.created_at
    assert req.headers["webhook-id"].startswith("msg_")

    (delivery,) = await hooks.deliveries(sub)
    assert delivery["status"] == "delivered"
    assert delivery["attempts"] == 1
    assert str(delivery["event_id"]) == event.event_id
    (attempt,) = await ops.attempts(str(delivery["id"]))
    assert attempt.outcome == "delivered"
    assert attempt.status_code == 204
    assert attempt.latency_ms >= 0


async def test_webhook_dispatcher__a_delivered_attempt_frees_its_slot_before_its_write(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    # One slot. The outcome writes are held up (their attempts table is locked): the second
    # delivery is still sent, since the first one's exchange ended well.
    one_slot = hook_settings.model_copy(
        update={"webhook_concurrency": 1, "webhook_endpoint_concurrency": 1}
    )
    second = asyncio.Event()

    async with Sink(signal_on(second, 2)) as sink:
        sub = await hooks.subscribe(sink.url())
        await hooks.publish([sub])
        await hooks.publish([sub])
        async with pool.acquire() as blocker, blocker.transaction():
            await blocker.execute("LOCK TABLE ripple_webhook_attempts IN EXCLUSIVE MODE")
            run = asyncio.create_task(dispatcher(pool, one_slot).run_until_idle())
            await asyncio.wait_for(second.wait(), 30)
        assert await run == 2
    assert [r["status"] for r in await hooks.deliveries(sub)] == ["delivered", "delivered"]


async def test_webhook_dispatcher__retries_until_sink_recovers(
    ops: Deliveries, pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    def flaky(_req: Received, n: int) -> Reply:
        return Reply(500, body=b"boom " * 1000) if n <= 3 else Reply(200, body=b"ok")

    async with Sink(flaky) as sink:
        sub = await hooks.subscribe(sink.url())
        await hooks.publish([sub])
        for expected in (1, 2, 3):
            await dispatcher(pool, hook_settings).run_until_idle()
            (row,) = await hooks.deliveries(sub)
            assert (row["status"], row["attempts"], row["last_status_code"]) == (
                "pending",
                expected,
                500,
            )
            # durable schedule: the next attempt is in the future, nothing is due now
            assert await dispatcher(pool, hook_settings).run_until_idle() == 0
            await hooks.make_due()
        await dispatcher(pool, hook_settings).run_until_idle()

    (row,) = await hooks.deliveries(sub)
    assert (row["status"], row["attempts"]) == ("delivered", 4)
    ids = {r.headers["webhook-id"] for r in sink.received}
    assert len(sink.received) == 4
    assert len(ids) == 1  # webhook-id is stable across retries
    attempts = await ops.attempts(str(row["id"]))
    assert [a.outcome for a in attempts] == ["retry", "retry", "retry", "delivered"]
    assert len(attempts[0].response_body or "") == 2048  # first 2 KiB of the response
    assert attempts[3].response_body == "ok"


async def test_webhook_dispatcher__first_retry_follows_default_schedule(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    async with Sink(lambda _r, _n: Reply(500)) as sink:
        sub = await hooks.subscribe(sink.url())
        await hooks.publish([sub])
        await dispatcher(pool, hook_settings).run_until_idle()
    wait = await pool.fetchval(
        "SELECT extract(epoch FROM next_attempt_at - now()) FROM ripple_webhook_deliveries"
    )
    assert 4.0 <= float(wait) <= 5.6  # 5 s ± 10 % jitter


async def test_webhook_dispatcher__redirect_is_a_failure_and_not_followed(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    async with Sink(lambda r, _n: Reply(302, (("location", "/elsewhere"),))) as sink:
        sub = await hooks.subscribe(sink.url())
        await hooks.publish([sub])
        await dispatcher(pool, hook_settings).run_until_idle()
    assert [r.path for r in sink.received] == ["/hook"]
    (row,) = await hooks.deliveries(sub)
    assert row["status"] == "pending"
    assert row["last_status_code"] == 302
    assert "redirects are not followed" in row["last_error"]


async def test_webhook_dispatcher__410_disables_subscription(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    one_at_a_time = hook_settings.model_copy(update={"webhook_endpoint_concurrency": 1})
    async with Sink(lambda _r, _n: Reply(410)) as sink:
        sub = await hooks.subscribe(sink.url())
        await hooks.publish([sub])
        await hooks.publish([sub])
        await dispatcher(pool, one_at_a_time).run_until_idle()
    sub_row = await pool.fetchrow(
        "SELECT status, status_reason FROM ripple_subscriptions WHERE id = $1", uuid.UUID(sub.id)
    )
    assert sub_row is not None
    assert sub_row["status"] == "disabled"
    assert "410" in sub_row["status_reason"]
    rows = await hooks.deliveries(sub)
    assert sorted(r["status"] for r in rows) == ["failed", "pending"]
    # deliveries of a disabled subscription are not attempted
    assert len(sink.received) == 1


@pytest.mark.parametrize("status", [429, 503])
async def test_webhook_dispatcher__honours_retry_after(
    pool: Pool, hook_settings: Settings, hooks: Hooks, status: int
) -> None:
    async with Sink(lambda _r, _n: Reply(status, (("retry-after", "120"),))) as sink:
        sub = await hooks.subscribe(sink.url())
        await hooks.publish([sub])
        await dispatcher(pool, hook_settings).run_until_idle()
    wait = await pool.fetchval(
        "SELECT extract(epoch FROM next_attempt_at - now()) FROM ripple_webhook_deliveries"
    )
    assert 115 <= float(wait) <= 120


async def test_webhook_dispatcher__exhausted_then_redriven(
    ops: Deliveries, pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    healthy = False

    def respond(_r: Received, _n: int) -> Reply:
        return Reply(200) if healthy else Reply(500)

    retry = RetryPolicy(max_attempts=2, initial_interval=0.0, jitter=0.0).to_json()
    # Exhaustion alone: the circuit breaker (which six failures in a row would open) is not
    # what this test is about.
    hook_settings = hook_settings.model_copy(update={"webhook_circuit_failures": 1000})
    async with Sink(respond) as sink:
        sub = await hooks.subscribe(sink.url(), retry=retry)
        for _ in range(3):
            await hooks.publish([sub])
        await dispatcher(pool, hook_settings).run_until_idle()
        rows = await hooks.deliveries(sub)
        assert [(r["status"], r["attempts"]) for r in rows] == [("failed", 2)] * 3
        assert "gave up after 2 attempts" in rows[0]["last_error"]

        page = await ops.list(status="failed", subscription_id=sub.id)
        assert len(page.items) == 3

        healthy = True
        first = str(rows[0]["id"])
        redriven = await ops.redrive(first)
        assert (redriven.status, redriven.attempts) == ("pending", 0)
        with pytest.raises(Conflict, match="only failed"):
            await ops.redrive(first)
        with pytest.raises(NotFound):
            await ops.redrive(str(uuid.uuid4()))
        await dispatcher(pool, hook_settings).run_until_idle()
        assert (await ops.get(first)).status == "delivered"  # type: ignore[union-attr]

        assert await ops.redrive_failed(subscription_id=sub.id) == 2
        await dispatcher(pool, hook_settings).run_until_idle()
    rows = await hooks.deliveries(sub)
    assert {r["status"] for r in rows} == {"delivered"}


async def test_webhook_dispatcher__continuous_failure_disables_subscription(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    from structlog.testing import capture_logs

    settings = hook_settings.model_copy(update={"webhook_disable_after": 3600.0})
    async with Sink(lambda _r, _n: Reply(500)) as sink:
        sub = await hooks.subscribe(sink.url())
        await hooks.publish([sub])
        await dispatcher(pool, settings).run_until_idle()
        status = "SELECT status FROM ripple_subscriptions WHERE id = $1"
        assert await pool.fetchval(status, uuid.UUID(sub.id)) == "active"
        # move time: the endpoint has been failing for two hours
        await pool.execute(
            "UPDATE ripple_webhook_health SET failing_since = now() - interval '2 hours'"
        )
        await hooks.make_due()
        with capture_logs() as logs:
            await dispatcher(pool, settings).run_until_idle()
    assert await pool.fetchval(status, uuid.UUID(sub.id)) == "disabled"
    assert any(e["event"] == "webhook_endpoint_failing" for e in logs)


async def test_webhook_rotate_secret__signs_with_both_secrets_during_overlap(
    ops: Deliveries, pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    async with Sink() as sink:
        sub = await hooks.subscribe(sink.url())
        new = await ops.rotate_secret(sub.id, overlap=3600)
        await hooks.publish([sub])
        await dispatcher(pool, hook_settings).run_until_idle()
    req = sink.received[0]
    assert len(req.headers["webhook-signature"].split(" ")) == 2
    Webhook(new).verify(req.body, req.headers)
    Webhook(sub.target["secret"]).verify(req.body, req.headers)


async def test_webhook_kind__fan_out_is_idempotent_per_event_and_subscription(
    pool: Pool, hooks: Hooks
) -> None:
    sub = await hooks.subscribe("http://127.0.0.1:9/x")
    event = await hooks.publish([sub])
    from ripple.platform.core.db import transaction

    async with transaction(pool) as conn:
        assert await hooks.kind.fan_out(conn, [(event, [sub])]) == [0]
    assert len(await hooks.deliveries(sub)) == 1


async def test_webhook_kind__validate_checks_url_secret_and_options(
    hook_settings: Settings, settings: Settings
) -> None:
    strict = WebhookKind(settings)
    with pytest.raises(InvalidInput, match="loopback"):
        await strict.validate({"type": "webhook", "url": "http://127.0.0.1:8080/"})
    with pytest.raises(InvalidInput, match="http"):
        await strict.validate({"type": "webhook", "url": "ftp://example.com/"})
    lenient = WebhookKind(hook_settings)
    ok = await lenient.validate({"type": "webhook", "url": "http://127.0.0.1:8080/"})
    assert ok["secret"].startswith("whsec_")
    with pytest.raises(InvalidInput, match="secret"):
        await lenient.validate({"type": "webhook", "url": "http://127.0.0.1/", "secret": "x y"})
    with pytest.raises(InvalidInput, match="timeout"):
        await lenient.validate({"type": "webhook", "url": "http://127.0.0.1/", "timeout": 0})


class _Resolver:
    def __init__(self, answers: dict[str, list[str]]) -> None:
        self.answers = answers

    async def resolve(self, host: str, port: int) -> list[str]:
        from ripple.subscribers.webhooks.ssrf import Unresolvable

        if host not in self.answers:
            raise Unresolvable(f"webhook host {host!r} does not resolve")
        return self.answers[host]


async def test_webhook_kind__validate_resolves_names(settings: Settings) -> None:
    kind = WebhookKind(
        settings,
        resolver=_Resolver({"internal.example": ["10.0.0.7"], "public.example": ["8.8.8.8"]}),
    )
    with pytest.raises(InvalidInput, match=r"internal\.example.*10\.0\.0\.7"):
        await kind.validate({"type": "webhook", "url": "https://internal.example/h"})
    await kind.validate({"type": "webhook", "url": "https://public.example/h"})
    # A host that does not resolve yet has nothing to refuse; every attempt checks it again.
    ok = await kind.validate({"type": "webhook", "url": "https://not-yet.example/h"})
    assert ok["url"] == "https://not-yet.example/h"


async def test_webhook_list_deliveries__filters_and_pages(
    ops: Deliveries, pool: Pool, hooks: Hooks
) -> None:
    a = await hooks.subscribe("http://127.0.0.1:9/a")
    b = await hooks.subscribe("http://127.0.0.1:9/b")
    for _ in range(3):
        await hooks.publish([a, b])
    page = await ops.list(subscription_id=a.id, limit=2)
    assert len(page.items) == 2
    assert page.next_cursor is not None
    rest = await ops.list(subscription_id=a.id, limit=2, cursor=page.next_cursor)
    assert len(rest.items) == 1
    assert rest.next_cursor is None
    ids = [d.id for d in page.items + rest.items]
    assert ids == sorted(ids, reverse=True)
    assert {d.subscription_id for d in page.items + rest.items} == {a.id}
    assert len((await ops.list(status="pending")).items) == 6
    with pytest.raises(InvalidInput):
        await ops.list(status="nope")
    _ = datetime.now(UTC)


async def test_webhook_endpoint_failing__no_series_outlives_its_subscription(
    pool: Pool, hook_settings: Settings, hooks: Hooks
) -> None:
    from prometheus_client import REGISTRY

    from ripple.platform.ops.observability import GaugeCollector

    def gauge(sub: str) -> float | None:
        return REGISTRY.get_sample_value("webhook_endpoint_failing", {"subscription": sub})

    async with Sink(lambda _r, _n: Reply(500)) as sink:
        kept = await hooks.subscribe(sink.url("/kept"))
        deleted = await hooks.subscribe(sink.url("/deleted"))
        await hooks.publish([kept, deleted])
        await dispatcher(pool, hook_settings).run_until_idle()
    await pool.execute("DELETE FROM ripple_subscriptions WHERE id = $1", uuid.UUID(deleted.id))
    # A worker that delivered to it keeps no series for the deleted subscription ...
    assert gauge(deleted.id) is None
    # ... and the collector (the gauge's one source) reports the endpoints that still exist.
    await GaugeCollector(pool, hook_settings).refresh()
    assert gauge(kept.id) == 1
    assert gauge(deleted.id) is None
