"""The dashboard's topic catalogue pages, served from the store."""

from __future__ import annotations

import httpx
import pytest

from ripple.platform.client import Client
from ripple.platform.ui import catalogue

LOOPBACK = {"host": "127.0.0.1"}  # loopback without tokens: the dashboard needs no login


async def test_ui_catalogue__topic_page_counts_its_own_events_past_the_listing_cap(
    client: Client, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The topic page's rate is the topic's own count, not its row in the capped catalogue
    # listing (which, at one topic, holds only "a.first").
    monkeypatch.setattr(catalogue, "MAX_TOPICS", 1)
    await client.publish("a.first", {"n": 1})
    for n in range(3):
        await client.publish("b.second", {"n": n})
    page = await http.get("/ui/catalogue/b.second", headers=LOOPBACK)
    assert page.status_code == 200, page.text
    rate = catalogue.RATE_WINDOW.total_seconds() / 60
    assert f'<td id="rate">{3 / rate:.1f} ' in page.text
