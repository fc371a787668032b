"""The client's parts (`client.schedules`, `client.queues`, ...) exist from construction and
follow the client's connection: unusable with a clear error before `connect()` and after
`close()`, usable while connected, again after a reconnect."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.core.wake import RunReady
from ripple.platform.errors import RippleError
from ripple.platform.events.backfill import Backfills
from ripple.platform.events.publish import Publisher
from ripple.platform.events.subscriptions import Subscriptions
from ripple.platform.ops.observability import GaugeCollector
from ripple.platform.schedules.schedules import Schedules
from ripple.subscribers import QueueTarget
from ripple.subscribers.queues.queues import Queues
from ripple.subscribers.webhooks.webhook import Deliveries
from ripple.workflows.runs.client import WorkflowClient
from ripple.workflows.runs.operations import RunOperations
from tests.helpers import assert_eventually

NOT_CONNECTED = "client is not connected"

PARTS: dict[str, type] = {
    "workflows": WorkflowClient,
    "subscriptions": Subscriptions,
    "publisher": Publisher,
    "operations": RunOperations,
    "backfills": Backfills,
    "queues": Queues,
    "schedules": Schedules,
    "deliveries": Deliveries,
    "gauges": GaugeCollector,
}

#: A call per part that reads or writes (and flat methods that delegate to one), each reaching
#: the database; `gauges` only logs a failed refresh, by design.
CALLS: dict[str, Callable[[Client], Awaitable[Any]]] = {
    "workflows.get_run": lambda c: c.workflows.get_run("run-1"),
    "workflows.start": lambda c: c.workflows.start("report", {}),
    "subscriptions.list": lambda c: c.subscriptions.list(),
    "publisher.publish": lambda c: c.publisher.publish("order.created", {"id": 1}),
    "operations.retry": lambda c: c.operations.retry("run-1"),
    "queues.send": lambda c: c.queues.send("audit", {"x": 1}),
    "queues.receive": lambda c: c.queues.receive("audit"),
    "schedules.list": lambda c: c.schedules.list(),
    "deliveries.list": lambda c: c.deliveries.list(),
    "start": lambda c: c.start("report", {}),
    "publish": lambda c: c.publish("order.created", {"id": 1}),
    "list_subscriptions": lambda c: c.list_subscriptions(),
    "hold": lambda c: c.hold("run-1"),
}


def test_parts_exist_before_connect(settings: Settings) -> None:
    client = Client(settings=settings)

    for name, kind in PARTS.items():
        assert isinstance(getattr(client, name), kind), name


@pytest.mark.parametrize("call", list(CALLS), ids=list(CALLS))
async def test_a_part_used_before_connect_raises_not_connected(
    settings: Settings, call: str
) -> None:
    client = Client(settings=settings)

    with pytest.raises(RippleError, match=NOT_CONNECTED):
        await CALLS[call](client)


async def test_parts_work_while_connected_and_again_after_a_reconnect(settings: Settings) -> None:
    client = Client(settings=settings)
    schedules, queues = client.schedules, client.queues

    async with client:
        assert await client.schedules.list() == []
        await client.subscribe("order.*", QueueTarget("audit"))
        assert (await client.publish("order.created", {"id": 1})).deliveries == 1
        assert [m.body for m in await client.queues.receive("audit")] == [{"id": 1}]

    with pytest.raises(RippleError, match=NOT_CONNECTED):
        await client.queues.send("audit", {"x": 2})

    async with client:
        assert client.schedules is schedules
        assert client.queues is queues
        assert (await client.publish("order.created", {"id": 2})).deliveries == 1
        assert [m.body for m in await client.queues.receive("audit")] == [{"id": 2}]


async def test_a_wake_hint_sent_after_close_is_dropped(settings: Settings) -> None:
    """A hint scheduled around a caller's commit may fire after the client closed: hints only
    wake, so it is dropped, never raised from a timer callback."""
    client = Client(settings=settings)
    async with client:
        starts = client.workflows.starts
    starts.waker.notify(RunReady(workflow="any"))  # no error
    with pytest.raises(RippleError, match=NOT_CONNECTED):
        client.waker.notify(RunReady(workflow="any"))


async def test_a_command_client_leaves_no_connection_behind(client: Client) -> None:
    """`Client.for_command` drops its connections on `close()` (no goodbye awaited): the server
    still sees them end, and what the command wrote stays."""

    async def others() -> int:
        return int(
            await client.pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
        )

    before = await others()
    async with Client.for_command(settings=client.settings) as command:
        handle = await command.start("report", {"n": 1})
        assert await others() == before + 1

    async def gone() -> bool:
        return await others() == before

    await assert_eventually(gone)
    run = await client.get_run(handle.run_id)
    assert run is not None
    assert run.input == {"n": 1}
