"""The dashboard's topic catalogue pages, served from the store."""

from __future__ import annotations

import httpx
import pytest

from ripple.platform.client import Client
from ripple.platform.ui import catalogue
from ripple.subscribers import QueueTarget

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


async def test_ui_catalogue__topic_page_lists_the_subscriptions_matching_it(
    client: Client, http: httpx.AsyncClient
) -> None:
    mine = await client.subscribe("orders.*", QueueTarget("orders"))
    every = await client.subscribe("#", QueueTarget("all"))
    other = await client.subscribe("users.*", QueueTarget("users"))
    await client.pause_subscription(every.id)
    page = await http.get("/ui/catalogue/orders.created", headers=LOOPBACK)
    assert page.status_code == 200, page.text
    listed = page.text.split('id="topic-subscriptions"', 1)[1].split("</table>", 1)[0]
    assert mine.id in listed
    assert every.id in listed
    assert "status-paused" in listed
    assert other.id not in listed
