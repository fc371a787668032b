"""A webhook dispatcher process for the chaos battery.

`python -m tests.chaos.dispatcher_main` connects a `Client` from the RIPPLE_* environment, runs
one `WebhookDispatcher` (no workflows) and prints `ready` once it runs; SIGTERM stops it. The
test measures this process's memory (/proc/PID/status) while receivers abuse it.
"""

from __future__ import annotations

import asyncio
import signal

from ripple.platform.client import Client
from ripple.platform.core.config import load_settings
from ripple.platform.core.logs import configure_logging
from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher


async def main() -> None:
    settings = load_settings()
    configure_logging(console=settings.log_console, level=settings.log_level)
    async with Client(settings=settings) as client:
        dispatcher = WebhookDispatcher(client.pool, client.waker, client.settings)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, dispatcher.stop)
        task = asyncio.create_task(dispatcher.run())
        await asyncio.sleep(0)
        print("ready", flush=True)
        await task
        print("stopped", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
