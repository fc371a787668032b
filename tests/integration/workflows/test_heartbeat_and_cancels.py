"""`LeaseHeartbeat` and `CancelListener` on their own, against claims made in Postgres."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field

from ripple.workflows import WorkflowContext, store, workflow
from ripple.workflows.runtime.cancels import CancelListener
from ripple.workflows.runtime.heartbeat import LeaseHeartbeat
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App

WORKER = "heartbeat-test-worker"


@workflow(name="held")
async def held(ctx: WorkflowContext) -> int:
    return int(await ctx.step.run("one", lambda: 1))


@dataclass(eq=False)
class Claim:
    """Satisfies `HeldRun`: records when its lease was renewed."""

    run_id: str
    epoch: int
    renewed: list[float] = field(default_factory=list)

    def renew(self, sent: float) -> None:
        self.renewed.append(sent)


async def claim(app: App, count: int) -> list[Claim]:
    """Start `count` runs of `held` and claim them as WORKER (a 30 s lease)."""
    for _ in range(count):
        await app.workflows.start(held)
    await store.register_worker(
        app.pool,
        worker_id=WORKER,
        hostname=socket.gethostname(),
        pid=os.getpid(),
        serves=[{"workflow": "held"}],
    )
    async with app.pool.acquire() as conn:
        claims = await store.claim_runs(
            conn, worker_id=WORKER, lease=30.0, limit=count, pairs=[("held", 1)]
        )
    assert len(claims) == count
    return [Claim(c.run_id, c.epoch) for c in claims]


async def lease_seconds_left(app: App, run_id: str) -> float:
    left = await app.pool.fetchval(
        "SELECT extract(epoch FROM available_at - now()) FROM ripple_runs WHERE run_id = $1",
        run_id,
    )
    return float(left)


def heartbeat(
    app: App, claims: list[Claim], lost: list[Sequence[Claim]], lease: float = 600.0
) -> LeaseHeartbeat[Claim]:
    return LeaseHeartbeat(
        pool=lambda: app.pool,
        worker_id=WORKER,
        lease=lease,
        held=lambda: claims,
        on_lost=lost.append,
    )


async def test_heartbeat__extends_held_leases_fenced_by_epoch_and_reports_the_lost(
    app: App,
) -> None:
    kept, fenced = await claim(app, 2)
    stale = Claim(fenced.run_id, fenced.epoch - 1)  # an older claim of that run: fenced out
    lost: list[Sequence[Claim]] = []
    before = await app.pool.fetchval(
        "SELECT heartbeat_at FROM ripple_workers WHERE worker_id = $1", WORKER
    )

    assert await heartbeat(app, [kept, stale], lost).beat() == [stale]

    assert lost == [[stale]]
    assert len(kept.renewed) == 1
    assert stale.renewed == []
    assert await lease_seconds_left(app, kept.run_id) > 500  # extended from 30 s to 600 s
    assert await lease_seconds_left(app, fenced.run_id) < 31  # the stale claim changed nothing
    after = await app.pool.fetchval(
        "SELECT heartbeat_at FROM ripple_workers WHERE worker_id = $1", WORKER
    )
    assert after > before


async def test_heartbeat__loses_a_run_canceled_meanwhile_and_keeps_beating_in_its_loop(
    app: App,
) -> None:
    first, second = await claim(app, 2)
    assert await app.workflows.cancel(second.run_id) is True
    lost: list[Sequence[Claim]] = []
    beating = heartbeat(app, [first, second], lost, lease=0.3)  # beats every 0.1 s
    task = asyncio.create_task(beating.run())
    try:
        await assert_eventually(lambda: len(first.renewed) >= 3, timeout=10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert lost
    assert all(round_ == [second] for round_ in lost)
    assert second.renewed == []


async def test_cancel_listener__reports_in_flight_runs_canceled_elsewhere(app: App) -> None:
    first, second, third = await claim(app, 3)
    running = {first.run_id, second.run_id}  # `third` is not in flight here
    reported: list[set[str]] = []
    listener = CancelListener(
        waker=app.waker,
        pool=lambda: app.pool,
        running=lambda: running,
        on_canceled=reported.append,
    )
    assert await listener.check() == set()

    task = asyncio.create_task(listener.run())
    try:
        await asyncio.wait_for(listener.listening.wait(), 10)
        # cancel() commits, then sends the RunCanceled hint the listener waits for
        assert await app.workflows.cancel(second.run_id) is True
        assert await app.workflows.cancel(third.run_id) is True
        await assert_eventually(lambda: {second.run_id} in reported, timeout=10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert not listener.listening.is_set()
    assert all(ids == {second.run_id} for ids in reported)
    assert await listener.check() == {second.run_id}
