"""The dashboard in a real Chromium (Playwright, Debian's /usr/bin/chromium) against a real
`ripple serve` with tokens: every page without JS errors, login/logout, actions that change the
database, inert `<script>` payloads, CSRF, and the event trace.

Tests are sync (Playwright's sync API); they set data up through the REST API.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.e2e.conftest import TOKEN, ApiServer, Process

if TYPE_CHECKING:
    import playwright.sync_api as playwright_sync
else:
    playwright_sync = pytest.importorskip("playwright.sync_api")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
PAGES = ["/ui/", "/ui/runs", "/ui/topics", "/ui/queues", "/ui/deliveries", "/ui/schedules"]

if not Path(CHROMIUM).exists():
    pytest.fail(f"{CHROMIUM} is missing: `make setup` installs it (apt-get install chromium)")


@pytest.fixture(scope="module")
def browser(api_server: ApiServer) -> Iterator[playwright_sync.Browser]:
    """One Chromium for the whole module. It starts after (and stops before) the server's
    fixtures: Playwright's sync API keeps an event loop running, which `asyncio.run` in those
    fixtures must not meet."""
    with playwright_sync.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def rest(api_server: ApiServer) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as http:
        yield http


class Page:
    """A logged-in browser page that records JS errors."""

    def __init__(self, page: playwright_sync.Page, base: str) -> None:
        self.page, self.base, self.errors = page, base, list[str]()
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on(
            "console",
            lambda msg: self.errors.append(msg.text) if msg.type == "error" else None,
        )

    def go(self, path: str) -> playwright_sync.Page:
        response = self.page.goto(self.base + path)
        assert response is not None, path
        assert response.ok, path
        return self.page

    def login(self) -> None:
        self.page.goto(self.base + "/ui/login")
        self.page.fill("input[name=token]", TOKEN)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(self.base + "/ui/")


@pytest.fixture
def ui(browser: playwright_sync.Browser, api_server: ApiServer) -> Iterator[Page]:
    context = browser.new_context()
    try:
        page = Page(context.new_page(), api_server.url)
        page.login()
        yield page
    finally:
        context.close()


def start_run(rest: httpx.Client, input: object) -> str:
    created = rest.post(f"/v1/workflows/ui-{uuid.uuid4().hex[:8]}/runs", json={"input": input})
    assert created.status_code == 201, created.text
    return str(created.json()["runId"])


def test_browser__every_page_loads_without_js_errors(ui: Page, rest: httpx.Client) -> None:
    run_id = start_run(rest, {"n": 1})
    for path in [*PAGES, f"/ui/runs/{run_id}"]:
        page = ui.go(path)
        page.wait_for_load_state("load")
        assert page.evaluate("typeof htmx") == "object", path
    # one live refresh completes without errors
    with ui.page.expect_response(lambda r: r.url.endswith(f"/ui/runs/{run_id}")):
        pass
    assert ui.errors == []


def test_browser__login_required_and_logout(
    browser: playwright_sync.Browser, api_server: ApiServer
) -> None:
    context = browser.new_context()
    try:
        page = Page(context.new_page(), api_server.url)
        page.page.goto(api_server.url + "/ui/queues")
        assert "/ui/login" in page.page.url
        page.page.fill("input[name=token]", "wrong")
        page.page.click("button[type=submit]")
        assert page.page.locator(".error").is_visible()
        page.page.fill("input[name=token]", TOKEN)
        page.page.click("button[type=submit]")
        page.page.wait_for_url(api_server.url + "/ui/queues")
        cookies = {c["name"]: c for c in context.cookies()}
        assert cookies["ripple_session"]["httpOnly"]
        assert cookies["ripple_session"]["sameSite"] == ("Strict")
        page.page.click("#logout")
        page.page.wait_for_url(lambda url: "/ui/login" in url)
        page.page.goto(api_server.url + "/ui/runs")
        assert "/ui/login" in page.page.url
        assert page.errors == []
    finally:
        context.close()


def test_browser__cancel_and_signal_change_the_run(ui: Page, rest: httpx.Client) -> None:
    run_id = start_run(rest, {"n": 2})
    page = ui.go(f"/ui/runs/{run_id}")
    page.click("#signal-open")
    page.fill("input[name=name]", "approved")
    page.fill("textarea[name=payload]", '{"by": "ann"}')
    page.click("#send-signal")
    page.wait_for_selector("#flash")
    assert "Signal" in page.inner_text("#flash")
    page.click("#cancel")
    page.wait_for_selector("#flash")
    assert rest.get(f"/v1/runs/{run_id}").json()["status"] == "canceled"
    assert page.inner_text("#run-status") == "canceled"
    assert ui.errors == []


def test_browser__redrive_moves_dead_letters_back(ui: Page, rest: httpx.Client) -> None:
    queue = f"ui-dead-{uuid.uuid4().hex[:6]}"
    assert rest.post(f"/v1/queues/{queue}/messages", json={"body": {"p": 1}}).status_code == 201
    deadline = time.monotonic() + 30
    # Receive with a tiny visibility until the receive limit (10) dead-letters the message.
    while rest.get(f"/v1/queues/{queue}/stats").json()["deadLetters"] == 0:
        assert time.monotonic() < deadline, "the message never became a dead letter"
        rest.post(
            f"/v1/queues/{queue}/messages/receive",
            json={"visibilityTimeout": 0.001, "wait": 0.5},
        )
    page = ui.go(f"/ui/queues?peek={queue}")
    page.locator(f"form[action='/ui/queues/{queue}/redrive'] button").click()
    page.wait_for_selector("#flash")
    assert rest.get(f"/v1/queues/{queue}/stats").json()["deadLetters"] == 0
    assert ui.errors == []


def test_browser__script_payload_is_inert(ui: Page, rest: httpx.Client) -> None:
    run_id = start_run(rest, {"name": "<script>window.pwned = 1</script>"})
    page = ui.go(f"/ui/runs/{run_id}")
    assert "<script>window.pwned = 1</script>" in page.inner_text("#input")
    assert page.evaluate("window.pwned") is None
    assert ui.errors == []


def test_browser__csrf_less_post_is_refused(ui: Page, rest: httpx.Client) -> None:
    run_id = start_run(rest, {"n": 3})
    # A POST from the logged-in browser (with its cookie) but without the CSRF field.
    status = ui.go("/ui/runs").evaluate(
        "async (url) => (await fetch(url, {method: 'POST', body: new URLSearchParams()})).status",
        f"/ui/runs/{run_id}/cancel",
    )
    assert status == 403
    assert rest.get(f"/v1/runs/{run_id}").json()["status"] == "pending"


def test_browser__event_trace_shows_message_delivery_and_run(ui: Page, rest: httpx.Client) -> None:
    tag = uuid.uuid4().hex[:6]
    topic = f"uitrace{tag}.created"
    for target in (
        {"type": "queue", "queue": f"uitrace-{tag}"},
        {"type": "webhook", "url": "http://127.0.0.1:9/hook"},
        {"type": "workflow", "workflow": f"uitrace-{tag}"},
    ):
        made = rest.post("/v1/subscriptions", json={"pattern": topic, "target": target})
        assert made.status_code == 201, made.text
    event_id = rest.post(f"/v1/topics/{topic}/events", json={"payload": {"id": 1}}).json()[
        "eventId"
    ]
    run_id = rest.get("/v1/runs", params={"workflow": f"uitrace-{tag}"}).json()["items"][0]["runId"]
    page = ui.go(f"/ui/events/{event_id}")
    assert page.locator(".queue-message").count() == 1
    assert page.locator(".webhook-delivery").count() == 1
    page.click(f"a[href='/ui/runs/{run_id}']")
    page.wait_for_url(lambda url: url.endswith(f"/ui/runs/{run_id}"))
    assert ui.errors == []


def wait_for(check: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_browser__retry_resumes_a_canceled_run(ui: Page, rest: httpx.Client) -> None:
    run_id = start_run(rest, {"n": 4})
    page = ui.go(f"/ui/runs/{run_id}")
    assert page.locator("#retry").count() == 0  # a pending run cannot be retried
    assert rest.delete(f"/v1/runs/{run_id}").status_code == 200
    # no reload: the page's live refresh brings the new status and the Retry button
    page.wait_for_selector("#retry")
    assert page.inner_text("#run-status") == "canceled"
    page.click("#retry")
    page.wait_for_selector("#flash")
    assert "Retried" in page.inner_text("#flash")
    assert rest.get(f"/v1/runs/{run_id}").json()["status"] == "pending"
    assert ui.errors == []


def test_browser__fork_from_a_chosen_step(
    ui: Page, rest: httpx.Client, worker_process: Process
) -> None:
    made = rest.post("/v1/workflows/onboard-user/runs", json={"input": {"userId": 901}})
    assert made.status_code == 201, made.text
    run_id = made.json()["runId"]

    def journaled() -> bool:
        steps = rest.get(f"/v1/runs/{run_id}/steps").json()
        items = steps["items"] if isinstance(steps, dict) else steps
        return any(s["key"] == "send-welcome" for s in items)

    wait_for(journaled, "the run to journal send-welcome")
    page = ui.go(f"/ui/runs/{run_id}")
    page.click("#fork-open")
    page.select_option("#fork-step", "send-welcome")
    page.click("#fork")
    page.wait_for_url(lambda url: f"/ui/runs/{run_id}" not in url and "/ui/runs/" in url)
    forked_id = page.url.split("?")[0].rsplit("/", 1)[1]
    forked = rest.get(f"/v1/runs/{forked_id}").json()
    assert forked["forkedFrom"] == run_id
    assert forked["input"]["userId"] == 901  # the original input, kept
    assert page.locator("#forked-from").get_attribute("href") == f"/ui/runs/{run_id}"
    assert ui.errors == []


def test_browser__schedules_trigger_pause_and_resume(ui: Page, rest: httpx.Client) -> None:
    name = f"ui-sched-{uuid.uuid4().hex[:6]}"
    workflow = f"ui-sched-{uuid.uuid4().hex[:6]}"
    made = rest.post("/v1/schedules", json={"name": name, "workflow": workflow, "every": 3600})
    assert made.status_code == 201, made.text
    page = ui.go("/ui/schedules")
    row = page.locator(f"#schedule-{name}")
    row.locator("button.trigger").click()
    page.wait_for_selector("#flash")
    runs = rest.get("/v1/runs", params={"workflow": workflow}).json()["items"]
    assert len(runs) == 1
    assert page.locator(f"#schedule-{name} a[href='/ui/runs/{runs[0]['runId']}']").count() == 1
    page.locator(f"#schedule-{name} button.pause").click()
    page.wait_for_selector(f"#schedule-{name} button.resume")
    assert rest.get(f"/v1/schedules/{name}").json()["paused"] is True
    page.locator(f"#schedule-{name} button.resume").click()
    page.wait_for_selector(f"#schedule-{name} button.pause")
    assert rest.get(f"/v1/schedules/{name}").json()["paused"] is False
    assert ui.errors == []


def test_browser__read_only_token_sees_no_actions_and_its_posts_are_refused(
    browser: playwright_sync.Browser, api_server: ApiServer, rest: httpx.Client
) -> None:
    made = rest.post("/v1/tokens", json={"name": "ui-reader", "scopes": ["read"]})
    assert made.status_code == 201, made.text
    run_id = start_run(rest, {"n": 5})
    context = browser.new_context()
    try:
        page = Page(context.new_page(), api_server.url)
        page.page.goto(api_server.url + "/ui/login")
        page.page.fill("input[name=token]", made.json()["secret"])
        page.page.click("button[type=submit]")
        page.page.wait_for_url(api_server.url + "/ui/")
        run_page = page.go(f"/ui/runs/{run_id}")
        assert run_page.inner_text("#run-status") == "pending"
        for action in ("#cancel", "#retry", "#fork-form", "#signal-form"):
            assert run_page.locator(action).count() == 0, action
        # A forged POST with the session's valid CSRF token (from the logout form) is refused.
        csrf = run_page.locator("input[name=csrf]").first.get_attribute("value")
        assert csrf
        status = run_page.evaluate(
            "async ([url, csrf]) => (await fetch(url, {method: 'POST', "
            "body: new URLSearchParams({csrf})})).status",
            [f"/ui/runs/{run_id}/cancel", csrf],
        )
        assert status == 403
        assert rest.get(f"/v1/runs/{run_id}").json()["status"] == "pending"
        assert page.errors == [] or all("403" in e for e in page.errors)
    finally:
        context.close()
