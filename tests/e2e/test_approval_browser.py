"""The approval page in a real Chromium against `ripple serve` and `ripple worker` running
`examples.approvals` (tokens on): a person with the link, and no login, approves a refund; the
run resumes with the decision; the link is single-use; an altered link shows nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from tests.e2e.conftest import REPO_ROOT, TOKEN, Process, free_port, wait_healthy
from tests.e2e.test_ui_browser import CHROMIUM, CHROMIUM_ARGS

if TYPE_CHECKING:
    import playwright.sync_api as playwright_sync
else:
    playwright_sync = pytest.importorskip("playwright.sync_api")

APP = "examples.approvals"


@pytest.fixture(scope="module")
def server(ripple_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {**ripple_env, "RIPPLE_API_TOKENS": TOKEN}
    port = free_port()
    logs = tmp_path_factory.mktemp("approvals")
    api = Process(
        ["serve", "--host", "127.0.0.1", "--port", str(port), "--app", APP],
        env,
        REPO_ROOT,
        logs / "serve.log",
    )
    worker = Process(["worker", "--app", APP], env, REPO_ROOT, logs / "worker.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, api)
        worker.wait_output("ripple worker running")
        yield url
    finally:
        assert worker.stop() == 0, worker.text()[-3000:]
        assert api.stop() == 0, api.text()[-3000:]


@pytest.fixture(scope="module")
def rest(server: str) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server, headers=headers, timeout=30.0) as http:
        yield http


@pytest.fixture(scope="module")
def browser(server: str) -> Iterator[playwright_sync.Browser]:
    with playwright_sync.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _eventually(check: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} did not happen within {timeout}s"
        time.sleep(0.1)


def test_approval_page__approve_from_the_link_resumes_the_run(
    browser: playwright_sync.Browser, rest: httpx.Client, server: str
) -> None:
    started = rest.post(
        "/v1/workflows/refund/runs",
        json={"input": {"customer": "acme", "amount": 250, "reason": "<b>broken</b>"}},
    )
    assert started.status_code == 201, started.text
    run_id = started.json()["runId"]

    def pending() -> dict[str, Any] | None:
        items = rest.get("/v1/approvals").json()
        return next((i for i in items if i["runId"] == run_id), None)

    item = _eventually(pending, "the pending approval")
    assert (
        rest.get("/v1/runs", params={"where": 'customer = "acme" and amount > 100'}).json()[
            "items"
        ][0]["runId"]
        == run_id
    )
    context = browser.new_context()  # no dashboard session: the link is enough
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        response = page.goto(server + item["url"])
        assert response is not None
        assert response.status == 200
        assert "<b>broken</b>" in page.inner_text("#details")  # shown as text
        page.fill("#by", "ann")
        page.fill("#comment", "fine by me")
        page.click("#approve")
        page.wait_for_selector("#flash")
        assert "Approved" in page.inner_text("#flash")
        assert "approved by ann" in page.inner_text("#state")

        def completed() -> dict[str, Any] | None:
            run = rest.get(f"/v1/runs/{run_id}").json()
            return run if run["status"] == "completed" else None

        run = _eventually(completed, "the run's completion")
        assert run["output"] == {"refunded": True, "approvedBy": "ann", "comment": "fine by me"}

        # Single use: the page now shows the decision, a second POST is refused.
        page.goto(server + item["url"])
        assert page.locator("#decide").count() == 0
        status = page.evaluate(
            "async (url) => (await fetch(url, {method: 'POST', body: "
            "new URLSearchParams({decision: 'reject'})})).status",
            item["url"],
        )
        assert status == 409
        # An altered link shows nothing of the approval.
        altered = page.goto(server + item["url"][:-4] + "AAAA")
        assert altered is not None
        assert altered.status == 404
        assert "not valid" in page.inner_text("#state")
        assert errors == []
    finally:
        context.close()
