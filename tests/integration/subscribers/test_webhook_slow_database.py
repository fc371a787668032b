"""Background writers follow the worker's timeout rule: a database slower than
RIPPLE_DB_TIMEOUT but within the lease delays recording a sent delivery, it does not cancel it
(a cancelled record leaves the delivery due again once its claim lapses: sent twice)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.ops.sweeper import Sweeper
from ripple.subscribers import WebhookTarget
from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher
from tests.integration.subscribers.webhook_sink import Received, Reply, Sink
from tests.pgproxy import PgProxy

#: Seconds the database stalls once the endpoint answered: past RIPPLE_DB_TIMEOUT (0.5 s
#: below), within the lease (the `settings` fixture's 5 s).
STALL = 1.5


async def test_database_stall_while_recording__the_delivery_is_recorded_once_and_sent_once(
    settings: Settings, proxy: PgProxy
) -> None:
    through = settings.model_copy(
        update={
            "database_url": proxy.url,
            "db_timeout": 0.5,
            "webhook_allowed_networks": ["127.0.0.0/8"],
        }
    )
    assert through.db_timeout < STALL < through.lease_seconds

    def stall_then_answer(_request: Received, _n: int) -> Reply:
        # The endpoint got the delivery: the database stalls while its attempt is recorded.
        proxy.stall()
        asyncio.get_running_loop().call_later(STALL, proxy.resume)
        return Reply(200)

    async with Sink(stall_then_answer) as sink, Client(settings=through) as client:
        await client.subscribe("order.*", WebhookTarget(sink.url()))
        await client.publish("order.placed", {"n": 1})
        (dispatcher,) = client.background_services(webhooks=True, sweeper=False)[:1]
        assert isinstance(dispatcher, WebhookDispatcher)
        assert await dispatcher.run_until_idle() == 1

        direct = await asyncpg.connect(settings.database_url)
        try:
            row = await direct.fetchrow("SELECT status, attempts FROM ripple_webhook_deliveries")
            attempts = await direct.fetchval("SELECT count(*) FROM ripple_webhook_attempts")
            # As if every claim had lapsed: only a delivery never recorded is due again.
            await direct.execute(
                "UPDATE ripple_webhook_deliveries SET next_attempt_at = now() "
                "WHERE status = 'pending'"
            )
        finally:
            await direct.close()
        assert row is not None
        assert (row["status"], row["attempts"], attempts) == ("delivered", 1, 1)
        again = client.background_services(webhooks=True, sweeper=False)[0]
        assert isinstance(again, WebhookDispatcher)
        assert await again.run_until_idle() == 0
    assert len(sink.received) == 1


async def test_background_writers__a_statement_past_db_timeout_within_the_lease_completes(
    settings: Settings,
) -> None:
    quick = settings.model_copy(update={"db_timeout": 0.3})
    async with Client(settings=quick) as client:
        with pytest.raises(TimeoutError):  # the API's bound
            await client.pool.execute("SELECT pg_sleep(0.6)")
        services = client.background_services(webhooks=True, sweeper=True)
        dispatcher, sweeper = services[0], services[1]
        assert isinstance(dispatcher, WebhookDispatcher)
        assert isinstance(sweeper, Sweeper)
        for service in (dispatcher, sweeper):
            await service._pool.execute("SELECT pg_sleep(0.6)")
