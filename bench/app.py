"""Workflows the benchmarks run."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from ripple.workflows import Break, Concurrency, Continue, WorkflowContext, workflow


async def _noop() -> None:
    return None


def _noop_sync() -> None:
    """A sync step body: Ripple runs it in a thread so it cannot block the event loop."""
    return None


@workflow(name="noop3")
async def noop3(ctx: WorkflowContext) -> None:
    await ctx.step.run("a", _noop)
    await ctx.step.run("b", _noop)
    await ctx.step.run("c", _noop)


@workflow(name="noop3-sync")
async def noop3_sync(ctx: WorkflowContext) -> None:
    await ctx.step.run("a", _noop_sync)
    await ctx.step.run("b", _noop_sync)
    await ctx.step.run("c", _noop_sync)


@workflow(name="one-step")
async def one_step(ctx: WorkflowContext) -> None:
    await ctx.step.run("a", _noop)


def _wall() -> float:
    return time.time()


@workflow(name="sleeper")
async def sleeper(ctx: WorkflowContext, seconds: float) -> float:
    """Returns how late the sleep woke, in seconds."""
    planned = await ctx.step.run("planned", _wall) + seconds
    await ctx.step.sleep("nap", seconds)
    woke = await ctx.step.run("woke", _wall)
    return float(woke - planned)


@workflow(name="waiter")
async def waiter(ctx: WorkflowContext, key: int) -> dict[str, Any] | None:
    return await ctx.step.wait_for_event(
        "go", event="bench.go", match={"key": key}, timeout=timedelta(minutes=5)
    )


@workflow(name="child")
async def child(ctx: WorkflowContext, value: int) -> int:
    return value + 1


@workflow(name="parent")
async def parent(ctx: WorkflowContext, value: int) -> int:
    out: int = await ctx.step.run_workflow(child, value)
    return out


async def _tick(i: int) -> int:
    return i


@workflow(name="looper")
async def looper(ctx: WorkflowContext, iterations: int) -> int:
    """A durable loop of `iterations` iterations, one step each, keeping the last 10."""

    async def body(ctx: WorkflowContext, i: int) -> Continue | Break:
        if i == iterations:
            return Break(i)
        return Continue(await ctx.step.run("tick", _tick, i + 1))

    return int(await ctx.step.loop("ticks", body, state=0, keep=10))


@workflow(name="keyed3", concurrency=Concurrency(limit=1, key="k"))
async def keyed3(ctx: WorkflowContext, inp: dict[str, Any]) -> None:
    """noop3 with at most one active run per key `k`."""
    await ctx.step.run("a", _noop)
    await ctx.step.run("b", _noop)
    await ctx.step.run("c", _noop)


@workflow(name="attrs3")
async def attrs3(ctx: WorkflowContext) -> None:
    """noop3 that also sets three search attributes."""
    ctx.set_attributes(customer="acme", amount=120.5, vip=True)
    await ctx.step.run("a", _noop)
    await ctx.step.run("b", _noop)
    await ctx.step.run("c", _noop)


WORKFLOWS = [noop3, noop3_sync, one_step, sleeper, waiter, child, parent, looper, keyed3, attrs3]
