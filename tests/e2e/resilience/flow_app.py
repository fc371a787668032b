"""Workflows of the flow-control tests with worker processes: each run records when
its step started and ended, in which process, in the `effects` table (see app.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from ripple.workflows import Concurrency, WorkflowContext, workflow
from tests.e2e.resilience.app import record_effect


async def _hold(run_id: str, key: str) -> int:
    pid = await record_effect(run_id, f"{key}.start")
    await asyncio.sleep(0.1)  # the workload: a window in which an overlap would show
    await record_effect(run_id, f"{key}.end")
    return pid


@workflow(name="per-key", concurrency=Concurrency(limit=1, key="account.id"))
async def per_key(ctx: WorkflowContext, inp: dict[str, Any]) -> int:
    key = str(inp["account"]["id"])
    return int(await ctx.step.run("hold", _hold, ctx.run_id, key))
