"""The topic catalogue in a real Chromium against `ripple serve`: every topic with its schema
versions, compatibility mode, a readable diff between versions, the subscriptions matching it,
its event rate and last events (schemas written straight into the registry's tables)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import asyncpg
import httpx
import pytest

from tests.e2e.conftest import TOKEN, ApiServer
from tests.e2e.test_ui_browser import CHROMIUM, CHROMIUM_ARGS, Page

if TYPE_CHECKING:
    import playwright.sync_api as playwright_sync
else:
    playwright_sync = pytest.importorskip("playwright.sync_api")

V1 = {
    "type": "object",
    "properties": {"userId": {"type": "integer"}, "plan": {"enum": ["free", "pro"]}},
    "required": ["userId"],
}
V2 = {
    "type": "object",
    "properties": {
        "userId": {"type": "integer"},
        "plan": {"enum": ["free", "pro", "team"]},
        "email": {"type": "string"},
    },
    "required": ["userId"],
}


async def _register(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        for version, schema in ((1, V1), (2, V2)):
            await conn.execute(
                "INSERT INTO ripple_topic_schemas (topic, version, schema, fingerprint)"
                " VALUES ('user.signup', $1, $2::jsonb, $3)",
                version,
                json.dumps(schema),
                f"v{version}",
            )
        await conn.execute(
            "INSERT INTO ripple_topic_contracts (topic, compatibility)"
            " VALUES ('user.signup', 'full')"
        )
    finally:
        await conn.close()


@pytest.fixture(scope="module")
def seeded(module_database_url: str, api_server: ApiServer) -> str:
    """Schemas, a subscription and events; returns the last event's id. Runs before Chromium
    (Playwright's sync API keeps an event loop that `asyncio.run` must not meet)."""
    asyncio.run(_register(module_database_url))
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30.0) as rest:
        created = rest.post(
            "/v1/subscriptions",
            json={"pattern": "user.*", "target": {"type": "queue", "queue": "catalogue-q"}},
        )
        assert created.status_code == 201, created.text
        event_id = ""
        for n in range(3):
            answer = rest.post("/v1/topics/user.signup/events", json={"payload": {"userId": n}})
            assert answer.status_code == 202, answer.text
            event_id = answer.json()["eventId"]
        rest.post("/v1/topics/order.paid/events", json={"payload": {"amount": 1}})
    return str(event_id)


@pytest.fixture(scope="module")
def browser(seeded: str) -> Iterator[playwright_sync.Browser]:
    with playwright_sync.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def ui(browser: playwright_sync.Browser, api_server: ApiServer) -> Iterator[Page]:
    context = browser.new_context()
    try:
        page = Page(context.new_page(), api_server.url)
        page.login()
        yield page
    finally:
        context.close()


def test_ui_catalogue__lists_topics_and_shows_versions_diff_and_events(
    ui: Page, seeded: str
) -> None:
    page = ui.go("/ui/catalogue")
    row = page.locator("#topic-user\\.signup")
    assert "v2" in row.inner_text()
    assert "full" in row.inner_text()
    assert page.locator("#topic-order\\.paid").count() == 1  # events, no schema

    row.locator("a").click()
    page.wait_for_url("**/ui/catalogue/user.signup")
    assert page.locator("#compatibility").inner_text() == "full"
    versions = page.locator("#versions").inner_text()
    assert "v2" in versions
    assert "v1" in versions
    diff = page.locator("#diff")
    added = " ".join(diff.locator(".diff-added").all_inner_texts())
    assert "/properties/email" in added
    assert '"team"' in added
    assert not diff.locator(".diff-removed").count()
    if path := os.environ.get("RIPPLE_CATALOGUE_SCREENSHOT"):
        page.screenshot(path=path, full_page=True)
    assert "catalogue-q" in page.locator("#topic-subscriptions").inner_text()
    last = page.locator("#last-events")
    assert seeded in last.inner_text()
    last.locator(f"a[href='/ui/events/{seeded}']").click()
    page.wait_for_url(f"**/ui/events/{seeded}")
    assert ui.errors == []
