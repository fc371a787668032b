"""An app for `ripple worker` shutdown tests: a sync step that runs far past the grace period."""

from __future__ import annotations

import time
from pathlib import Path

from ripple.workflows import WorkflowContext, workflow


def _slow(marker: str, seconds: float) -> str:
    Path(marker).write_text("started")
    time.sleep(seconds)  # a sync body: it runs in a thread, which nothing can stop
    Path(marker).write_text("finished")
    return "done"


@workflow(name="slow-sync")
async def slow_sync(ctx: WorkflowContext, inp: dict[str, object]) -> str:
    return await ctx.step.run("slow", _slow, str(inp["marker"]), float(str(inp["seconds"])))
