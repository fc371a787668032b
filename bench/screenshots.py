"""`make screenshots`: the dashboard's pages over the example app, as PNGs in docs/img/.

Creates a throwaway database (like the benchmarks), runs the onboarding example's worker and
the API in this process, publishes a few signups (one verified, some waiting), a queue message
that dies and a webhook to a closed port, two schedules (one triggered, one paused), then
captures each page with Debian's Chromium.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import uvicorn
from playwright.async_api import async_playwright

from bench.common import bench_database
from examples.onboarding import onboard_user, setup
from ripple.platform.api.app import create_app
from ripple.platform.client import Client
from ripple.platform.core.logs import configure_logging
from ripple.subscribers import QueueTarget, WebhookTarget
from ripple.workflows import Worker

OUT = Path(__file__).resolve().parents[1] / "docs" / "img"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]


async def _populate(client: Client) -> str:
    await setup(client)
    await client.subscribe("user.*", QueueTarget("audit"))
    await client.subscribe("user.signup", WebhookTarget("http://127.0.0.1:9/crm"))
    event_id = ""
    for user in range(1, 6):
        signup = {"userId": user, "email": f"user{user}@example.com"}
        event_id = (await client.publish("user.signup", signup)).event_id
    await client.queues.set_max_receives("audit", 1)
    await client.queues.receive("audit", max_messages=2, visibility_timeout=0.01)

    async def dead_lettered() -> bool:
        # the next receive past the limit moves the two received messages to dead letters
        await client.queues.receive("audit", max_messages=1, visibility_timeout=600)
        return (await client.queues.stats("audit")).dead_letters > 0

    await _until(dead_lettered)
    return event_id


async def _until(check: object, timeout: float = 60.0) -> None:
    for _ in range(int(timeout / 0.1)):
        if await check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the example never reached the state to capture")


async def main() -> None:
    configure_logging(level="warning")
    OUT.mkdir(parents=True, exist_ok=True)
    overrides = {"webhook_allowed_networks": ["127.0.0.0/8"], "poll_interval": 0.2}
    async with bench_database(**overrides) as db, Client(settings=db.settings) as client:
        client.workflows.register(onboard_user)
        worker = Worker(client, [onboard_user], handle_signals=False)
        worker_task = asyncio.create_task(worker.run())
        event_id = await _populate(client)

        async def waiting() -> bool:
            page = await client.list_runs("onboard-user", "waiting")
            return len(page.items) == 5

        await _until(waiting)
        await client.publish("user.verified", {"userId": 1})
        await client.schedules.create(
            "daily-digest", topic="digest.daily", cron="0 8 * * *", timezone="Europe/Berlin"
        )
        reminder = {"userId": 99, "email": "ops@example.com"}
        await client.schedules.create(
            "weekly-check", workflow="onboard-user", every=7 * 86400, input=reminder
        )
        await client.schedules.trigger("weekly-check")
        await client.schedules.pause("daily-digest")
        runs = (await client.list_runs("onboard-user")).items
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        config = uvicorn.Config(create_app(client), host="127.0.0.1", port=port, log_config=None)
        server = uvicorn.Server(config)
        server_task = asyncio.create_task(server.serve())
        await _until(lambda: asyncio.sleep(0, server.started))
        pages = {
            "overview": "/ui/",
            "runs": "/ui/runs",
            "run": f"/ui/runs/{runs[-1].run_id}",
            "event": f"/ui/events/{event_id}",
            "topics": "/ui/topics?topic=user.signup&payload=%7B%22userId%22%3A+7%7D",
            "queues": "/ui/queues?peek=audit",
            "deliveries": "/ui/deliveries?status=pending",
            "schedules": "/ui/schedules",
        }
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(
                executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS
            )
            page = await browser.new_page(viewport={"width": 1200, "height": 800})
            for name, path in pages.items():
                await page.goto(f"http://127.0.0.1:{port}{path}")
                await page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)
                print(f"docs/img/{name}.png", flush=True)
            await browser.close()
        server.should_exit = True
        worker.stop()
        await asyncio.gather(server_task, worker_task)


if __name__ == "__main__":
    asyncio.run(main())
