"""The dashboard's routes over ASGI (httpx): pages, login, CSRF, actions, escaping, event trace."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from ripple.platform.api.app import create_app
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.ui import routes, store
from ripple.subscribers import QueueTarget, WebhookTarget, WorkflowTarget
from ripple.workflows import Worker, WorkflowContext, workflow
from tests.helpers import csrf_of

PAGES = [
    "/ui/",
    "/ui/runs",
    "/ui/topics",
    "/ui/queues",
    "/ui/deliveries",
    "/ui/schedules",
    "/ui/audit",
]


@workflow(name="ui-two-steps")
async def two_steps(ctx: WorkflowContext, inp: dict[str, int]) -> int:
    a = await ctx.step.run("first", lambda: inp["n"] + 1)
    b = await ctx.step.run("second", lambda: a * 10)
    return int(b)


@pytest.fixture
async def ui(client: Client) -> AsyncIterator[httpx.AsyncClient]:
    """The dashboard without tokens (loopback mode)."""
    transport = httpx.ASGITransport(app=create_app(client))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        yield http


async def test_ui__root_redirects_and_every_page_renders(ui: httpx.AsyncClient) -> None:
    root = await ui.get("/")
    assert (root.status_code, root.headers["location"]) == (307, "/ui/")
    for page in PAGES:
        response = await ui.get(page)
        assert response.status_code == 200, page
        assert "text/html" in response.headers["content-type"]
        assert "/ui/static/htmx.min.js" in response.text
        assert 'id="live" hx-get="' in response.text, page  # refreshes itself
    assert (await ui.get("/ui/static/htmx.min.js")).text.startswith("var htmx")


async def test_ui__cancel_needs_csrf_then_changes_the_run(
    ui: httpx.AsyncClient, client: Client
) -> None:
    handle = await client.start("ui-never-runs", {"x": 1})
    page = await ui.get(f"/ui/runs/{handle.run_id}")
    assert page.status_code == 200
    refused = await ui.post(f"/ui/runs/{handle.run_id}/cancel", data={})
    assert refused.status_code == 403
    forged = await ui.post(f"/ui/runs/{handle.run_id}/cancel", data={"csrf": "0" * 64})
    assert forged.status_code == 403
    run = await client.get_run(handle.run_id)
    assert run is not None
    assert run.status == "pending"
    done = await ui.post(f"/ui/runs/{handle.run_id}/cancel", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303
    run = await client.get_run(handle.run_id)
    assert run is not None
    assert run.status == "canceled"


async def test_ui__signal_is_stored_for_the_run(ui: httpx.AsyncClient, client: Client) -> None:
    handle = await client.start("ui-never-runs", None)
    page = await ui.get(f"/ui/runs/{handle.run_id}")
    form = {"csrf": csrf_of(page.text), "name": "approved", "payload": '{"by": "ann"}'}
    assert (await ui.post(f"/ui/runs/{handle.run_id}/signal", data=form)).status_code == 303
    rows = await client.pool.fetch(
        "SELECT name, payload FROM ripple_signals WHERE run_id = $1", handle.run_id
    )
    assert [(r["name"], r["payload"]) for r in rows] == [("approved", {"by": "ann"})]
    shown = await ui.get(f"/ui/runs/{handle.run_id}")
    assert "approved" in shown.text


async def test_ui__script_payload_renders_as_text(ui: httpx.AsyncClient, client: Client) -> None:
    handle = await client.start("ui-never-runs", {"name": "<script>alert(1)</script>"})
    page = await ui.get(f"/ui/runs/{handle.run_id}")
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


async def test_ui__queue_redrive_moves_dead_letters_back(
    ui: httpx.AsyncClient, client: Client
) -> None:
    await client.queues.set_max_receives("jobs", 1)
    await client.queues.send("jobs", {"poison": True})
    await client.queues.receive("jobs", visibility_timeout=60)
    await client.pool.execute("UPDATE ripple_queue_messages SET visible_at = now()")
    assert await client.queues.receive("jobs") == []
    assert (await client.queues.stats("jobs")).dead_letters == 1
    page = await ui.get("/ui/queues?peek=jobs")
    assert "poison" in page.text
    done = await ui.post("/ui/queues/jobs/redrive", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303
    stats = await client.queues.stats("jobs")
    assert (stats.dead_letters, stats.visible) == (0, 1)


async def test_ui__event_trace_shows_message_delivery_and_run(
    settings: Settings,
) -> None:
    local = settings.model_copy(update={"webhook_allowed_networks": ["127.0.0.0/8"]})
    async with Client(settings=local) as client:
        await client.subscribe("order.#", QueueTarget("orders"))
        await client.subscribe("order.*", WorkflowTarget("fulfil"))
        await client.subscribe("order.created", WebhookTarget("http://127.0.0.1:9/hook"))
        await client.subscribe("user.*", QueueTarget("users"))
        published = await client.publish("order.created", {"id": 7})
        transport = httpx.ASGITransport(app=create_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as ui:
            page = await ui.get(f"/ui/events/{published.event_id}")
            missing = await ui.get("/ui/events/00000000-0000-0000-0000-000000000000")
        runs = await client.list_runs("fulfil")
        message_id = await client.pool.fetchval("SELECT id FROM ripple_queue_messages")
        delivery_id = await client.pool.fetchval("SELECT id::text FROM ripple_webhook_deliveries")
    assert page.status_code == 200
    assert len(runs.items) == 1
    assert f"/ui/runs/{runs.items[0].run_id}" in page.text
    assert f"message <code>{message_id}</code>" in page.text
    assert delivery_id in page.text
    assert "pattern does not match" in page.text or "user.*" in page.text
    assert missing.status_code == 404


@pytest.fixture
async def secured(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    locked = settings.model_copy(update={"api_tokens": ["s3cret"]})
    async with Client(settings=locked) as client:
        transport = httpx.ASGITransport(app=create_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://ripple") as http:
            yield http


async def test_ui__login_required_and_logout_ends_the_session(
    secured: httpx.AsyncClient,
) -> None:
    first = await secured.get("/ui/runs")
    assert first.status_code == 303
    assert first.headers["location"].startswith("/ui/login")
    wrong = await secured.post("/ui/login", data={"token": "nope", "next": "/ui/runs"})
    assert "error=" in wrong.headers["location"]
    assert "ripple_session" not in secured.cookies
    ok = await secured.post("/ui/login", data={"token": "s3cret", "next": "/ui/runs"})
    assert (ok.status_code, ok.headers["location"]) == (303, "/ui/runs")
    cookie = ok.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    page = await secured.get("/ui/runs")
    assert page.status_code == 200
    out = await secured.post("/ui/logout", data={"csrf": csrf_of(page.text)})
    assert out.status_code == 303
    after = await secured.get("/ui/runs")
    assert after.status_code == 303
    assert after.headers["location"].startswith("/ui/login")


async def test_ui__login_next_is_not_an_open_redirect(secured: httpx.AsyncClient) -> None:
    ok = await secured.post("/ui/login", data={"token": "s3cret", "next": "https://evil.example"})
    assert ok.headers["location"] == "/ui/"


async def test_ui__no_tokens_refuses_remote_clients(client: Client) -> None:
    transport = httpx.ASGITransport(app=create_app(client), client=("203.0.113.9", 5000))
    async with httpx.AsyncClient(transport=transport, base_url="http://ripple") as http:
        assert (await http.get("/ui/")).status_code == 403


async def test_ui__queue_with_only_dead_letters_is_listed(
    ui: httpx.AsyncClient, client: Client
) -> None:
    # No settings row: the default receive limit (10) dead-letters it on the 11th receive.
    await client.queues.send("only-dead", {"p": 1})
    for _ in range(11):
        await client.queues.receive("only-dead", visibility_timeout=60)
        await client.pool.execute("UPDATE ripple_queue_messages SET visible_at = now()")
    assert (await client.queues.stats("only-dead")).dead_letters == 1
    for page in ("/ui/queues", "/ui/"):
        assert "only-dead" in (await ui.get(page)).text, page


async def test_ui__overview_counts_recent_runs_and_stranded_ones(
    ui: httpx.AsyncClient, client: Client
) -> None:
    for _ in range(3):
        await client.start("ui-counted", None)
    page = (await ui.get("/ui/")).text
    assert "runs created: 3" in page
    assert 'href="/ui/runs?workflow=ui-counted&status=pending">3<' in page
    # no worker serves ui-counted: its runs are stranded
    assert "<td>unpinned</td><td>3</td>" in page


async def test_ui__refused_action_says_why_and_changes_nothing(
    ui: httpx.AsyncClient, client: Client
) -> None:
    handle = await client.start("ui-never-runs", None)
    page = await ui.get(f"/ui/runs/{handle.run_id}")
    missing = "00000000-0000-0000-0000-000000000001"
    done = await ui.post(f"/ui/deliveries/{missing}/redrive", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303
    shown = await ui.get(done.headers["location"])
    assert "Not redriven" in shown.text
    assert missing in shown.text


async def test_ui__retry_resumes_a_canceled_run(ui: httpx.AsyncClient, client: Client) -> None:
    handle = await client.start("ui-never-runs", None)
    assert await client.cancel(handle.run_id)
    page = await ui.get(f"/ui/runs/{handle.run_id}")
    assert 'id="retry"' in page.text
    done = await ui.post(f"/ui/runs/{handle.run_id}/retry", data={"csrf": csrf_of(page.text)})
    assert done.status_code == 303
    run = await client.get_run(handle.run_id)
    assert run is not None
    assert run.status == "pending"
    # a pending run offers no retry; retrying it anyway is refused with the reason
    again = await ui.get(f"/ui/runs/{handle.run_id}")
    assert 'id="retry"' not in again.text
    refused = await ui.post(f"/ui/runs/{handle.run_id}/retry", data={"csrf": csrf_of(page.text)})
    assert (
        "only failed or canceled runs can be retried"
        in (await ui.get(refused.headers["location"])).text
    )


async def test_ui__fork_from_a_chosen_step_starts_a_new_run(
    ui: httpx.AsyncClient, client: Client
) -> None:
    async with Worker(client, [two_steps], webhooks=False, sweeper=False):
        source = await client.start(two_steps, {"n": 1})
        assert await source.result(timeout=10) == 20
        page = await ui.get(f"/ui/runs/{source.run_id}")
        assert '<option value="first">' in page.text
        assert '<option value="second">' in page.text
        form = {"csrf": csrf_of(page.text), "step": "second", "input": '{"n": 5}'}
        done = await ui.post(f"/ui/runs/{source.run_id}/fork", data=form)
        assert done.status_code == 303
        new_id = done.headers["location"].split("?")[0].rsplit("/", 1)[1]
        assert new_id != source.run_id
        # the journal up to "second" is copied: "first" keeps its result (2), "second" reruns
        assert await client.handle(new_id).result(timeout=10) == 20
    forked = await client.get_run(new_id)
    assert forked is not None
    assert (forked.forked_from, forked.input) == (source.run_id, {"n": 5})
    shown = await ui.get(done.headers["location"])
    assert f'href="/ui/runs/{source.run_id}" id="forked-from"' in shown.text
    assert "Forked from step second" in shown.text
    bad = {"csrf": csrf_of(page.text), "step": "nope", "input": ""}
    refused = await ui.post(f"/ui/runs/{source.run_id}/fork", data=bad)
    assert "not in the journal" in (await ui.get(refused.headers["location"])).text


async def test_ui__schedules_pause_resume_trigger_and_last_runs(
    ui: httpx.AsyncClient, client: Client
) -> None:
    hourly = await client.schedules.create("ui-hourly", workflow="ui-scheduled", every=3600)
    await client.schedules.create("ui-ticker", topic="ui.tick", cron="*/5 * * * *")
    page = await ui.get("/ui/schedules")
    assert "ui-hourly" in page.text
    assert "event on ui.tick" in page.text
    assert hourly.next_run_at.strftime("%Y-%m-%d %H:%M:%S") in page.text
    csrf = csrf_of(page.text)
    for action in ("trigger", "trigger", "pause"):
        done = await ui.post(f"/ui/schedules/ui-hourly/{action}", data={"csrf": csrf})
        assert done.status_code == 303
    info = await client.schedules.get("ui-hourly")
    assert info is not None
    assert info.paused
    runs = (await client.list_runs("ui-scheduled")).items
    assert len(runs) == 2
    shown = (await ui.get("/ui/schedules")).text
    for run in runs:
        assert f'href="/ui/runs/{run.run_id}"' in shown
    assert "Resume" in shown
    await ui.post("/ui/schedules/ui-hourly/resume", data={"csrf": csrf})
    info = await client.schedules.get("ui-hourly")
    assert info is not None
    assert not info.paused
    missing = await ui.post("/ui/schedules/nope/trigger", data={"csrf": csrf})
    assert "no schedule" in (await ui.get(missing.headers["location"])).text
    assert (await ui.post("/ui/schedules/ui-hourly/pause", data={})).status_code == 403


async def test_ui__queue_peek_is_read_only_bounded_and_escaped(
    ui: httpx.AsyncClient, client: Client
) -> None:
    await client.queues.send("peeked", {"html": "<script>alert(1)</script>"})
    for i in range(30):
        await client.queues.send("peeked", {"i": i})
    page = await ui.get("/ui/queues?peek=peeked")
    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;" in page.text
    assert page.text.count('class="peek-body"') == 20
    stats = await client.queues.stats("peeked")
    assert (stats.visible, stats.in_flight) == (31, 0)  # nothing was received
    assert (await ui.get("/ui/queues?peek=bad%20name")).status_code == 404


async def test_ui__queue_counts_agree_with_stats_and_are_bounded(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = "counted"
    for i in range(4):
        await client.queues.send(q, {"i": i})
    await client.queues.send(q, {"late": True}, delay=3600)
    await client.queues.send(q, {"g": 1}, group_id="a")
    await client.queues.send(q, {"g": 2}, group_id="a")
    await client.queues.send(q, {"g": 3}, group_id="b", delay=3600)
    await client.queues.receive(q, max_messages=2, visibility_timeout=600)
    await client.queues.set_max_receives("other-dead", 1)
    await client.queues.send("other-dead", {"x": 1})
    await client.queues.receive("other-dead", visibility_timeout=60)
    await client.pool.execute(
        "UPDATE ripple_queue_messages SET visible_at = now() WHERE queue = 'other-dead'"
    )
    assert await client.queues.receive("other-dead") == []

    stats = await client.queues.stats(q)
    counts = await store.queue_counts(client.pool, q)
    assert (counts.visible, counts.in_flight, counts.delayed, counts.dead_letters) == (
        stats.visible,
        stats.in_flight,
        stats.delayed,
        stats.dead_letters,
    )
    assert counts.oldest_age >= 0
    assert await store.queue_names(client.pool, 10) == ["counted", "other-dead"]
    assert (await store.queue_counts(client.pool, "other-dead")).dead_letters == 1

    monkeypatch.setattr(store, "QUEUE_CAP", 2)
    capped = await store.queue_counts(client.pool, q)
    assert capped.lower_bounds == {"visible", "in_flight", "delayed"}
    assert capped.shown("visible").startswith("≥ ")
    assert capped.shown("depth").startswith("≥ ")
    assert capped.shown("dead_letters") == "0"
    assert counts.lower_bounds == frozenset()
    assert counts.shown("depth") == str(stats.depth)


async def test_ui__run_page_shows_a_bounded_part_of_a_long_journal(
    ui: httpx.AsyncClient, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle = await client.start("ui-never-runs", None)
    await client.pool.execute(
        "INSERT INTO ripple_steps (run_id, key, seq, kind, status, attempts, started_at) "
        "SELECT $1, 'step-' || k, k, 'step', 'completed', 1, now() "
        "FROM generate_series(1, 5) AS k",
        handle.run_id,
    )
    whole = await ui.get(f"/ui/runs/{handle.run_id}")
    assert 'id="more-steps"' not in whole.text
    assert whole.text.count('<option value="step-') == 5
    monkeypatch.setattr(routes, "MAX_STEPS", 3)
    part = await ui.get(f"/ui/runs/{handle.run_id}")
    assert 'id="more-steps"' in part.text
    assert part.text.count('<option value="step-') == 3
    assert "step-4" not in part.text


async def test_ui__search_text_has_the_api_bound(ui: httpx.AsyncClient) -> None:
    """The dashboard's search boxes take what the API takes, and no more."""
    from ripple.platform.api.models import MAX_WHERE_LENGTH

    longest = '{"k": "' + "x" * (MAX_WHERE_LENGTH - 10) + '"}'
    assert len(longest) <= MAX_WHERE_LENGTH
    assert (await ui.get("/ui/events", params={"where": longest})).status_code == 200
    too_long = longest + " " * (MAX_WHERE_LENGTH + 1 - len(longest))
    for page in ("/ui/events", "/ui/runs"):
        assert (await ui.get(page, params={"where": too_long})).status_code == 422
