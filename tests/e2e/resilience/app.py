"""Workflows the resilience tests run in real worker processes.

Step bodies count their side effects OUTSIDE the journal: each inserts a row into the
test-created `effects` table over the process's own asyncpg pool, so the tests can tell how often
a body really ran (and in which process). `gated` steps block until the test opens a gate (a row
in `gates`), which lets a test crash, stop or terminate a worker while a step is in flight.
"""

from __future__ import annotations

import asyncio
import os
import signal
from typing import Any

import asyncpg

from ripple.workflows import Break, Continue, RetryPolicy, WorkflowContext, workflow

#: Schema the tests create in their database before starting workers.
SCHEMA = """
CREATE TABLE effects (
    run_id text NOT NULL,
    step   text NOT NULL,
    pid    integer NOT NULL,
    at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE gates (name text PRIMARY KEY);
"""

_pool: asyncpg.Pool | None = None
_pool_lock = asyncio.Lock()


async def _effects_pool() -> asyncpg.Pool:
    """This process's pool for effect rows: the database the worker uses, unless
    EFFECTS_DATABASE_URL names another (a ledger kept out of a fault done to Ripple's)."""
    global _pool
    async with _pool_lock:
        if _pool is None:
            url = os.environ.get("EFFECTS_DATABASE_URL") or os.environ["RIPPLE_DATABASE_URL"]
            _pool = await asyncpg.create_pool(url, min_size=1, max_size=4)
    return _pool


async def record_effect(run_id: str, step: str) -> int:
    """Insert one effect row for (run, step) from this process; return the pid."""
    pool = await _effects_pool()
    await pool.execute(
        "INSERT INTO effects (run_id, step, pid) VALUES ($1, $2, $3)", run_id, step, os.getpid()
    )
    return os.getpid()


async def gated_effect(run_id: str, step: str, gate: str) -> dict[str, Any]:
    """Record `step.started`, block until `gate` is open, record `step.done`; return the pid."""
    await record_effect(run_id, f"{step}.started")
    pool = await _effects_pool()
    while not await pool.fetchval("SELECT true FROM gates WHERE name = $1", gate):  # noqa: ASYNC110
        await asyncio.sleep(0.05)  # polls another process's write: no in-process event exists
    await record_effect(run_id, f"{step}.done")
    return {"pid": os.getpid()}


async def kill_self(run_id: str, step: str) -> None:
    """Record `step.started`, then SIGKILL this very worker process (a poison step)."""
    await record_effect(run_id, f"{step}.started")
    os.kill(os.getpid(), signal.SIGKILL)
    await asyncio.sleep(60)  # never reached: the process is gone


@workflow(name="three-steps")
async def three_steps(ctx: WorkflowContext) -> list[int]:
    """Three recorded steps, each one effect row; returns the pids that ran them."""
    return [await ctx.step.run(step, record_effect, ctx.run_id, step) for step in ("a", "b", "c")]


@workflow(name="gated")
async def gated(ctx: WorkflowContext, inp: dict[str, Any]) -> dict[str, Any]:
    """`first`, then `slow` (blocks on the gate named by the input), then `last`."""
    first = await ctx.step.run("first", record_effect, ctx.run_id, "first")
    slow = await ctx.step.run("slow", gated_effect, ctx.run_id, "slow", inp["gate"])
    last = await ctx.step.run("last", record_effect, ctx.run_id, "last")
    return {"first": first, "slow": slow["pid"], "last": last}


@workflow(name="poison")
async def poison(ctx: WorkflowContext) -> str:
    """`ok`, then a step that kills its worker on every attempt (3 attempts allowed)."""
    await ctx.step.run("ok", record_effect, ctx.run_id, "ok")
    await ctx.step.run(
        "poison",
        kill_self,
        ctx.run_id,
        "poison",
        retry=RetryPolicy(max_attempts=3, initial_interval=0.1, jitter=0.0),
    )
    return "unreachable"


@workflow(name="approval")
async def approval(ctx: WorkflowContext) -> dict[str, Any]:
    """`before`, a durable wait for signal `approve`, then `after`; returns the payload."""
    await ctx.step.run("before", record_effect, ctx.run_id, "before")
    payload = await ctx.step.wait_for_event("approve")
    after = await ctx.step.run("after", record_effect, ctx.run_id, "after")
    return {"payload": payload, "after": after}


@workflow(name="napper")
async def napper(ctx: WorkflowContext) -> int:
    """`a`, a durable 0.3 s sleep, then `b` (timers must fire without Redis)."""
    await ctx.step.run("a", record_effect, ctx.run_id, "a")
    await ctx.step.sleep("nap", 0.3)
    return int(await ctx.step.run("b", record_effect, ctx.run_id, "b"))


async def ledger_step(run_id: str, step: str, millis: int) -> dict[str, int]:
    """Write `step.start`, work for `millis` ms, write `step.end`: one execution in the ledger."""
    await record_effect(run_id, f"{step}.start")
    await asyncio.sleep(millis / 1000)
    await record_effect(run_id, f"{step}.end")
    return {"pid": os.getpid()}


@workflow(name="ledger")
async def ledger(ctx: WorkflowContext, millis: list[int]) -> list[int]:
    """Three ledger steps, `a` → `b` → `c`, each working for its `millis` entry."""
    out = []
    for step, ms in zip(("a", "b", "c"), millis, strict=True):
        done = await ctx.step.run(step, ledger_step, ctx.run_id, step, ms)
        out.append(done["pid"])
    return out


async def die_once(run_id: str, name: str) -> int:
    """SIGKILL this worker process the first time `name` runs for the run; return the pid."""
    pool = await _effects_pool()
    if not await pool.fetchval(
        "SELECT true FROM effects WHERE run_id = $1 AND step = $2", run_id, name
    ):
        await record_effect(run_id, name)
        os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(60)  # never reached
    return os.getpid()


async def race_branch(run_id: str, branch: str, first_pid: int) -> str:
    """Record the branch's start; branch `a` is slow in the first process and instant in any
    other, `b` the reverse, so a race decided again after a crash would pick the other one."""
    await record_effect(run_id, f"{branch}.started")
    slow = (os.getpid() == first_pid) == (branch == "a")
    await asyncio.sleep(0.5 if slow else 0.0)
    return branch


@workflow(name="crash-race")
async def crash_race(ctx: WorkflowContext) -> dict[str, Any]:
    """A race decided in one process, then a crash, then the rest in another."""
    first_pid = await ctx.step.run("pid", os.getpid)
    winner, value = await ctx.step.race(
        "pick",
        {
            "a": lambda: ctx.step.run("go", race_branch, ctx.run_id, "a", first_pid),
            "b": lambda: ctx.step.run("go", race_branch, ctx.run_id, "b", first_pid),
        },
    )
    await ctx.step.run("crash", die_once, ctx.run_id, "crash")
    return {"winner": winner, "value": value}


async def journal_rows(run_id: str, i: int) -> int:
    """Record the run's journal size at iteration `i` (an effect row `rows:<n>`)."""
    pool = await _effects_pool()
    rows = int(await pool.fetchval("SELECT count(*) FROM ripple_steps WHERE run_id = $1", run_id))
    await record_effect(run_id, f"rows:{rows}")
    return rows


@workflow(name="long-loop")
async def long_loop(ctx: WorkflowContext, inp: dict[str, Any]) -> int:
    """`iterations` loop iterations keeping 10; a journaled step every `every` iterations (it
    records the journal's size), and a SIGKILL of the worker at each of `kill_at` (once)."""
    iterations, every, kill_at = inp["iterations"], inp["every"], set(inp["kill_at"])

    async def body(ctx: WorkflowContext, i: int) -> Any:
        if i == iterations:
            return Break(i)
        if i % every == 0:
            await ctx.step.run("size", journal_rows, ctx.run_id, i)
        if i in kill_at:
            await ctx.step.run("kill", die_once, ctx.run_id, f"kill:{i}")
        return Continue(i + 1)

    return int(await ctx.step.loop("iterate", body, state=0, keep=10))


async def crash_until(run_id: str, kills: int) -> int:
    """SIGKILL this worker process on each of the first `kills` tries; then return the try."""
    pool = await _effects_pool()
    tries = int(
        await pool.fetchval(
            "SELECT count(*) FROM effects WHERE run_id = $1 AND step = 'crash-try'", run_id
        )
    )
    await record_effect(run_id, "crash-try")
    if tries < kills:
        os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(60)  # never reached
    return tries + 1


@workflow(name="flaky-crasher")
async def flaky_crasher(ctx: WorkflowContext, kills: int) -> int:
    """A step that kills its worker `kills` times, then succeeds (retry budget: 1 attempt)."""
    return int(
        await ctx.step.run(
            "crash", crash_until, ctx.run_id, kills, retry=RetryPolicy(max_attempts=1)
        )
    )
