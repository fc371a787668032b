"""The primary of a pg_auto_failover formation killed under load (keeper and Postgres
SIGKILLed, as a host dying would), the synchronous standby promoted. Every process reaches the
new primary through the multi-host URL (`target_session_attrs=read-write`); calls during the
switch fail with `Unavailable` and are retried with their keys.

Ledger: what Ripple acknowledged (starts, publishes with a queue and a webhook fan-out, signals)
is on the new primary afterwards, since synchronous replication had it on the standby before
the acknowledgement; every run completes; no step recorded before the failover runs again; a
worker frozen across the failover is fenced when it wakes up.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from ripple.platform.client import Client
from ripple.platform.errors import RippleError
from ripple.subscribers import QueueTarget, WebhookTarget
from tests.chaos import restart_app
from tests.chaos.conftest import FULL, chaos_environment
from tests.chaos.figures import record
from tests.chaos.test_postgres_restart import _assert_not_rerun, _recorded_starts
from tests.chaos.test_webhook_abuse import start_dispatcher, stop_after_deliveries
from tests.e2e.resilience import app as resilience_app
from tests.e2e.resilience.conftest import Effects
from tests.e2e.resilience.procs import Workers
from tests.e2e.resilience.test_resilience import _fenced_out
from tests.helpers import assert_eventually
from tests.servers import AutoFailoverFormation, RedisProcess

# Forming the cluster alone takes about 40 s: the full profile (`make chaos`) only.
pytestmark = [
    pytest.mark.skipif(not FULL, reason="full chaos profile (make chaos) only"),
    pytest.mark.timeout(420),
]

ACTIVE = ("pending", "running", "sleeping", "waiting")
SIGNALED = 20


@pytest.fixture
def formation() -> Iterator[AutoFailoverFormation]:
    servers = AutoFailoverFormation()
    try:
        servers.start()
        yield servers
    finally:
        servers.remove()


@pytest.fixture
def chaos_env(formation: AutoFailoverFormation, own_redis: RedisProcess) -> dict[str, str]:
    return chaos_environment(
        formation.url,
        RIPPLE_REDIS_URL=own_redis.url,
        RIPPLE_WEBHOOK_ALLOWED_NETWORKS="127.0.0.1/32",
    )


async def _retried(call: Callable[[], Awaitable[Any]], refused: Counter[str]) -> tuple[Any, float]:
    """`call` until it is acknowledged, each refusal (an outage) counted by its type; returns
    the result and when the acknowledged attempt began."""
    while True:
        began = time.monotonic()
        try:
            return await asyncio.wait_for(call(), 10), began
        except (RippleError, TimeoutError, OSError) as exc:
            refused[type(exc).__name__] += 1
            await asyncio.sleep(0.1)


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[str, Counter[int]]]:
    """A webhook receiver on loopback: its URL and how often each event's `n` arrived."""
    from aiohttp import web

    seen: Counter[int] = Counter()

    async def take(request: web.Request) -> web.Response:
        body = await request.json()
        seen[int(body["data"]["n"])] += 1
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", take)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/hook", seen
    finally:
        await runner.cleanup()


async def test_postgres_failover_under_load__nothing_acknowledged_is_lost(
    chaos_client: Client,
    chaos_effects: Effects,
    chaos_workers: Workers,
    chaos_env: dict[str, str],
    formation: AutoFailoverFormation,
    receiver: tuple[str, Counter[int]],
) -> None:
    hook, delivered = receiver
    worker = await chaos_workers.start(concurrency=50, app="tests.chaos.restart_app")
    dispatcher = await start_dispatcher(chaos_env)
    # A zombie: a worker frozen in a step across the failover, whose run another worker
    # finishes on the new primary meanwhile.
    zombie, standby = await asyncio.gather(
        chaos_workers.start(app="tests.e2e.resilience.app"),
        chaos_workers.start(app="tests.e2e.resilience.app", hold=True),
    )
    gated = await chaos_client.start(resilience_app.gated, {"gate": "g"})
    await assert_eventually(
        lambda: chaos_effects.count(gated.run_id, "slow.started", zombie.pid), timeout=60
    )
    zombie.send(signal.SIGSTOP)
    await chaos_client.subscribe("failover.#", QueueTarget("ledger"))
    await chaos_client.subscribe("failover.#", WebhookTarget(hook))
    waiting = [
        (await chaos_client.start(restart_app.signaled, idempotency_key=f"signaled-{n}")).run_id
        for n in range(SIGNALED)
    ]
    started: dict[str, str] = {}
    published: dict[int, str] = {}
    signaled: dict[str, bool] = {}
    refused: Counter[str] = Counter()
    stop = asyncio.Event()
    first_commit_after: list[float] = []
    killed_at: list[float] = []

    def acknowledged(began: float) -> None:
        """Note the first acknowledgement of a call made after the primary was dead."""
        if killed_at and began >= killed_at[0] and not first_commit_after:
            first_commit_after.append(time.monotonic() - killed_at[0])

    async def starter() -> None:
        n = 0
        while not stop.is_set():
            key = f"paced-{n}"
            handle, began = await _retried(
                lambda k=key: chaos_client.start(restart_app.paced, idempotency_key=k), refused
            )
            started[key] = handle.run_id
            acknowledged(began)
            n += 1
            await asyncio.sleep(0.05)

    async def publisher() -> None:
        n = 0
        while not stop.is_set():
            result, began = await _retried(
                lambda i=n: chaos_client.publish(
                    "failover.order", {"n": i}, idempotency_key=f"order-{i}"
                ),
                refused,
            )
            published[n] = result.event_id
            acknowledged(began)
            n += 1
            await asyncio.sleep(0.05)

    async def signaler() -> None:
        for run_id in waiting:
            _, began = await _retried(
                lambda r=run_id: chaos_client.signal(r, "go", {"ok": True}, idempotency_key="go"),
                refused,
            )
            signaled[run_id] = True
            acknowledged(began)
            await asyncio.sleep(0.2)

    tasks = [asyncio.create_task(t()) for t in (starter, publisher, signaler)]
    try:
        await assert_eventually(lambda: len(started) >= 40 and len(signaled) >= 5, timeout=120)
        protected = await _recorded_starts(chaos_client, chaos_effects)
        before = (len(started), len(published), len(signaled))
        await asyncio.to_thread(formation.kill_node, "node1")
        killed_at.append(time.monotonic())  # node1's keeper and Postgres are gone
        await asyncio.to_thread(formation.wait_primary, "node2")
        promoted = time.monotonic() - killed_at[0]
        await standby.release()  # claims the gated run once the zombie's lease lapsed
        await assert_eventually(
            lambda: chaos_effects.count(gated.run_id, "slow.started", standby.pid), timeout=60
        )
        await chaos_effects.open_gate("g")
        await gated.result(timeout=60)
        await assert_eventually(
            lambda: len(started) >= before[0] + 40 and len(signaled) == SIGNALED, timeout=180
        )
    finally:
        stop.set()
        await asyncio.gather(*tasks)

    ids = [*started.values(), *waiting]

    async def all_done() -> bool:
        rows = await chaos_client.pool.fetch(
            "SELECT status FROM ripple_runs WHERE run_id = ANY($1::text[])", ids
        )
        return len(rows) == len(ids) and not any(row["status"] in ACTIVE for row in rows)

    await assert_eventually(all_done, timeout=180, interval=0.2)
    statuses = Counter(
        row["status"]
        for row in await chaos_client.pool.fetch(
            "SELECT status FROM ripple_runs WHERE run_id = ANY($1::text[])", ids
        )
    )
    assert statuses == Counter({"completed": len(ids)}), statuses
    # Every acknowledged publish is on the new primary, fanned out to the queue exactly once.
    bodies: list[int] = []
    while batch := await chaos_client.queues.receive("ledger", max_messages=100):
        bodies += [int(m.body["n"]) for m in batch]
        for message in batch:
            await chaos_client.queues.ack("ledger", message.receipt)
    assert sorted(bodies) == sorted(published), "queue fan-out lost or duplicated events"
    # The zombie wakes up on a dead connection, reconnects to the new primary, and is fenced:
    # the journal the standby wrote stays as it is.
    journal = [(x.key, x.status, x.output) for x in await chaos_client.list_steps(gated.run_id)]
    zombie.send(signal.SIGCONT)
    await assert_eventually(lambda: _fenced_out(zombie, gated.run_id), timeout=60)
    after = [(x.key, x.status, x.output) for x in await chaos_client.list_steps(gated.run_id)]
    assert after == journal
    assert (await gated.result(timeout=5))["slow"] == standby.pid
    # Every acknowledged publish reaches the webhook (at least once: an attempt whose outcome
    # was not yet recorded when the primary died is sent again).
    await stop_after_deliveries(dispatcher, published, delivered)
    await _assert_not_rerun(chaos_client, chaos_effects, protected, "the failover")
    assert worker.proc.returncode is None, worker.stderr[-10:]
    record(
        "postgres-failover",
        lost=0,
        duplicated=0,
        recovery=f"{promoted:.1f}s to promote, first commit {first_commit_after[0]:.1f}s after "
        "the kill",
        during_outage=dict(refused),
        starts=len(started),
        publishes=len(published),
        signals=len(signaled),
        webhooks_resent=sum(n - 1 for n in delivered.values()),
        zombie="fenced",
    )
