"""Workflow engine resilience with real worker processes, real Postgres and real Redis.

Workers are `python -m tests.e2e.resilience.worker_main` subprocesses with a 2 s lease; they are
killed (SIGKILL), frozen (SIGSTOP/SIGCONT), terminated (SIGTERM) or cut off from Redis while a
step is in flight. Step bodies count their side effects in the test-created `effects` table
(outside the journal), so every assertion about "ran once" is about real executions.
"""

from __future__ import annotations

import asyncio
import signal
import socket
from typing import Any

import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from tests.e2e.resilience import app
from tests.e2e.resilience.conftest import Effects
from tests.e2e.resilience.procs import WorkerProcess, Workers
from tests.helpers import assert_eventually

# Real processes on a possibly busy machine: generous per-test budget (each test waits on
# conditions, so a quiet machine finishes far sooner).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

TERMINAL = {"completed", "failed", "canceled"}
#: Workers the poison test may go through before it calls the crash loop unbounded.
RECOVERIES = 4
MAX_RESTARTS = 6


async def _status(client: Client, run_id: str) -> str | None:
    run = await client.get_run(run_id)
    return None if run is None else str(run.status)


async def _recorded(client: Client, run_id: str, key: str) -> bool:
    """Whether the run's journal has committed a completed result for step `key`."""
    return any(s.key == key and s.status == "completed" for s in await client.list_steps(run_id))


def _fenced_out(worker: WorkerProcess, run_id: str) -> bool:
    """Whether the worker logged that it lost the run's lease (write refused or task aborted)."""
    return any(
        line.get("run_id") == run_id
        and (
            line.get("event") == "run_lease_lost"
            or (line.get("event") == "run_aborted" and line.get("reason") == "lease_lost")
        )
        for line in worker.logs()
    )


def _journal(steps: list[Any]) -> list[tuple[Any, ...]]:
    """The comparable content of a journal (what a stale writer must never change)."""
    return [
        (s.key, s.kind, s.status, s.attempts, s.output, s.error, s.started_at, s.completed_at)
        for s in steps
    ]


async def _gated_run_in_its_slow_step(
    client: Client, effects: Effects, workers: Workers, *, own_signals: bool = False
) -> tuple[WorkerProcess, WorkerProcess, Any]:
    """Two workers (the second on standby) and a gated run whose first step is recorded and
    whose slow step is executing on the first worker."""
    w1, w2 = await asyncio.gather(workers.start(own_signals=own_signals), workers.start(hold=True))
    handle = await client.start(app.gated, {"gate": "g"})
    await assert_eventually(lambda: effects.count(handle.run_id, "slow.started", w1.pid))
    await assert_eventually(lambda: _recorded(client, handle.run_id, "first"))
    return w1, w2, handle


async def test_worker_sigkill__mid_step_resumes_on_another_worker(
    client: Client, effects: Effects, workers: Workers
) -> None:
    w1, w2, handle = await _gated_run_in_its_slow_step(client, effects, workers)
    run_id = handle.run_id

    w1.send(signal.SIGKILL)
    assert await w1.wait_exit() == -signal.SIGKILL
    await w2.release()
    # the lease of the dead worker expires and the second worker re-runs the unrecorded step
    await assert_eventually(lambda: effects.count(run_id, "slow.started", w2.pid), timeout=20)
    await effects.open_gate("g")

    out = await handle.result(timeout=30)
    assert out == {"first": w1.pid, "slow": w2.pid, "last": w2.pid}
    assert await effects.counts(run_id) == {
        "first": 1,  # recorded before the kill: never again
        "slow.started": 2,  # the killed step ran at most twice
        "slow.done": 1,
        "last": 1,
    }
    steps = {s.key: s for s in await client.list_steps(run_id)}
    assert steps["slow"].status == "completed"
    assert steps["slow"].output == {"pid": w2.pid}


async def test_worker_sigstop__past_lease_is_fenced_after_sigcont(
    client: Client, effects: Effects, workers: Workers
) -> None:
    w1, w2, handle = await _gated_run_in_its_slow_step(client, effects, workers)
    run_id = handle.run_id

    w1.send(signal.SIGSTOP)  # frozen mid-step: no heartbeat, the lease runs out
    await w2.release()
    await assert_eventually(lambda: effects.count(run_id, "slow.started", w2.pid), timeout=20)
    await effects.open_gate("g")
    out = await handle.result(timeout=30)
    assert out == {"first": w1.pid, "slow": w2.pid, "last": w2.pid}
    run_before = await client.get_run(run_id)
    journal_before = _journal(await client.list_steps(run_id))

    # the frozen worker wakes up and tries to go on with the run: its writes are refused
    w1.send(signal.SIGCONT)
    await assert_eventually(lambda: _fenced_out(w1, run_id), timeout=20)
    w1.send(signal.SIGTERM)
    assert await w1.wait_exit() == 0

    run_after = await client.get_run(run_id)
    assert run_before is not None
    assert run_after is not None
    assert run_after.status == "completed"
    assert run_after.output == {"first": w1.pid, "slow": w2.pid, "last": w2.pid}
    assert run_after.completed_at == run_before.completed_at
    assert _journal(await client.list_steps(run_id)) == journal_before
    counts = await effects.counts(run_id)
    # the stale body may or may not get to finish before the worker learns it lost the lease
    assert counts.pop("slow.done") in (1, 2)
    assert counts == {
        "first": 1,
        "slow.started": 2,
        "last": 1,  # a worker whose lease lapsed starts no further step
    }


async def test_two_workers__500_runs_run_each_step_body_once(
    client: Client, effects: Effects, workers: Workers
) -> None:
    # no takeovers wanted here: a lease that a starved heartbeat cannot lose on a busy machine
    steady = {"concurrency": 50, "RIPPLE_LEASE_SECONDS": "15"}
    w1, w2 = await asyncio.gather(workers.start(**steady), workers.start(**steady))
    for _ in range(10):
        await asyncio.gather(*(client.start(app.three_steps) for _ in range(50)))

    async def completed() -> bool:
        page = await client.list_runs(workflow="three-steps", status="completed", limit=500)
        return len(page.items) == 500

    await assert_eventually(completed, timeout=45, interval=0.25)
    rows = await effects.pool.fetch(
        "SELECT run_id, step, count(*) AS n, min(pid) AS pid FROM effects GROUP BY run_id, step"
    )
    assert len(rows) == 500 * 3
    assert [(r["run_id"], r["step"], r["n"]) for r in rows if r["n"] != 1] == []
    assert {r["pid"] for r in rows} <= {w1.pid, w2.pid}


@pytest.mark.parametrize("own_signals", [False, True], ids=["worker-handles", "app-handles"])
async def test_worker_sigterm__in_flight_step_finishes_and_is_recorded(
    client: Client, effects: Effects, workers: Workers, own_signals: bool
) -> None:
    w1, w2, handle = await _gated_run_in_its_slow_step(
        client, effects, workers, own_signals=own_signals
    )
    run_id = handle.run_id

    w1.send(signal.SIGTERM)
    # the worker is shutting down with the step in flight
    if own_signals:  # handle_signals=False: the application's own handler ran, not the worker's
        await w1.wait_stdout("stopping")
        assert not [line for line in w1.logs() if line.get("event") == "worker_signal"]
    else:  # Worker.run() handled SIGTERM itself
        assert (await w1.wait_log("worker_signal"))["signal"] == "SIGTERM"
    await effects.open_gate("g")
    assert await w1.wait_exit() == 0

    steps = {s.key: s for s in await client.list_steps(run_id)}
    assert steps["slow"].status == "completed"
    assert steps["slow"].output == {"pid": w1.pid}
    assert "last" not in steps  # a stopping worker finishes its step but starts no other

    await w2.release()
    out = await handle.result(timeout=30)
    assert out == {"first": w1.pid, "slow": w1.pid, "last": w2.pid}
    assert await effects.counts(run_id) == {
        "first": 1,
        "slow.started": 1,  # recorded during the grace period: not re-executed
        "slow.done": 1,
        "last": 1,
    }


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_redis_unreachable__runs_complete(
    settings: Settings, effects: Effects, workers: Workers
) -> None:
    dead_redis = f"redis://127.0.0.1:{_closed_port()}/0"
    await workers.start(RIPPLE_REDIS_URL=dead_redis)
    async with Client(settings=settings.model_copy(update={"redis_url": dead_redis})) as client:
        steps = [await client.start(app.three_steps) for _ in range(5)]
        nappers = [await client.start(app.napper) for _ in range(2)]
        waiting = await client.start(app.approval)
        await assert_eventually(
            lambda: effects.count(waiting.run_id, "before"), timeout=20, interval=0.1
        )
        await client.signal(waiting.run_id, "approve", {"ok": True})

        for handle in [*steps, *nappers]:
            await handle.result(timeout=30)
        out = await waiting.result(timeout=30)
        assert out["payload"] == {"ok": True}
        for handle in steps:
            assert await effects.counts(handle.run_id) == {"a": 1, "b": 1, "c": 1}
        for handle in nappers:
            assert await effects.counts(handle.run_id) == {"a": 1, "b": 1}


async def test_poison_step__fails_run_after_its_crash_budget(
    client: Client, effects: Effects, workers: Workers
) -> None:
    handle = await client.start(app.poison)
    run_id = handle.run_id
    # a supervisor forks a fresh worker each time the previous one dies, like a process manager
    # would restart it; a shorter lease lets a dead worker's claim lapse sooner
    supervisor = await workers.start(
        restarts=MAX_RESTARTS, RIPPLE_LEASE_SECONDS="1", RIPPLE_MAX_RECOVERIES=str(RECOVERIES)
    )

    async def run_ended() -> bool:
        if supervisor.proc.returncode is not None:
            raise AssertionError(
                f"the poison step killed {MAX_RESTARTS + 1} workers: crash loop not bounded "
                f"({supervisor.stdout})"
            )
        return await _status(client, run_id) in TERMINAL

    await assert_eventually(run_ended, timeout=60, interval=0.05)
    run = await client.get_run(run_id)
    assert run is not None
    assert run.status == "failed"
    assert run.error is not None
    assert run.error["type"] == "WorkerLost"
    assert "'poison'" in run.error["message"]
    assert "RIPPLE_MAX_RECOVERIES" in run.error["message"]
    deaths = [line for line in supervisor.stdout if line.startswith("exited")]
    assert deaths == [f"exited {-signal.SIGKILL}"] * len(deaths)
    counts = await effects.counts(run_id)
    # `ok` is committed before the poison step's body begins, so it never runs again
    assert counts["ok"] == 1
    # the first claim, the claim after it (the first loss is charged to no run: the worker's
    # other runs could have caused it; from then on the run is a suspect, claimed alone) and
    # RECOVERIES charged recoveries; worker losses never touch the step's own attempt budget
    # (max_attempts=3), which stays unspent
    assert counts["poison.started"] == RECOVERIES + 2
    assert len(deaths) == counts["poison.started"]
    steps = {s.key: s for s in await client.list_steps(run_id)}
    assert steps["poison"].attempts == 1


async def test_waiting_run__survives_worker_sigkill(
    client: Client, effects: Effects, workers: Workers
) -> None:
    w1, w2 = await asyncio.gather(workers.start(), workers.start(hold=True))  # w2: standby
    handle = await client.start(app.approval)
    run_id = handle.run_id
    await assert_eventually(lambda: _is(client, run_id, "waiting"), timeout=20)

    w1.send(signal.SIGKILL)
    await w1.wait_exit()
    await w2.release()
    result = await client.signal(run_id, "approve", {"by": "ann"})
    assert result.delivered

    out = await handle.result(timeout=30)
    assert out == {"payload": {"by": "ann"}, "after": w2.pid}
    assert await effects.counts(run_id) == {"before": 1, "after": 1}


async def _is(client: Client, run_id: str, status: str) -> bool:
    return await _status(client, run_id) == status
