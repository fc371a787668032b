"""`bounded`: a call is answered by its deadline while its work unwinds on its own."""

from __future__ import annotations

import asyncio

import pytest

from ripple.platform.core.deadlines import Deadline, bounded
from ripple.platform.errors import NotFound, Unavailable
from tests.helpers import assert_eventually


class Stuck:
    """Work that never ends by itself and, once cancelled, unwinds only when `release` is set
    (a statement on a frozen server whose cancel request is not yet acknowledged)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = asyncio.Event()
        self.release = asyncio.Event()
        self.unwound = False

    async def work(self) -> int:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            await self.release.wait()
            self.unwound = True
            raise
        return 0


async def _value(n: int) -> int:
    await asyncio.sleep(0)
    return n


async def _missing() -> int:
    raise NotFound("no run x")


async def test_bounded__answers_at_the_deadline_without_waiting_for_the_work_to_unwind() -> None:
    stuck = Stuck()
    with pytest.raises(Unavailable, match="RIPPLE_DB_TIMEOUT"):
        await asyncio.wait_for(bounded(stuck.work(), Deadline(0.05)), 30)
    await asyncio.wait_for(stuck.cancelled.wait(), 30)
    assert not stuck.unwound  # answered while the work still unwinds
    stuck.release.set()
    await assert_eventually(lambda: stuck.unwound)


async def test_bounded__passes_the_work_outcome_through() -> None:
    assert await bounded(_value(3), Deadline(30)) == 3
    assert await bounded(_value(4), None) == 4
    with pytest.raises(NotFound):
        await bounded(_missing(), Deadline(30))


async def test_bounded__a_cancelled_caller_cancels_its_work() -> None:
    stuck = Stuck()
    caller = asyncio.ensure_future(bounded(stuck.work(), Deadline(30)))
    await asyncio.wait_for(stuck.started.wait(), 30)  # cancelled once its work is under way
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    await asyncio.wait_for(stuck.cancelled.wait(), 30)
    stuck.release.set()
