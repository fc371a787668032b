from __future__ import annotations

import asyncio

import pytest

from ripple.platform.core.wake import NullWaker, QueueReady, RunFinished


async def test_wake__local_hint_reaches_listener() -> None:
    waker = NullWaker(poll_interval=30)
    async with waker.listen("run:r1") as listener:
        waker.notify(RunFinished(run_id="r1"))
        assert await listener.wait(5) is True


async def test_wake__hint_before_wait_is_not_lost() -> None:
    waker = NullWaker(poll_interval=30)
    async with waker.listen("queue:q") as listener:
        waker.notify(QueueReady(queue="q"))
        await asyncio.sleep(0)
        assert await listener.wait(0) is True
        # consumed: the next wait times out
        assert await listener.wait(0) is False


async def test_wake__wait_never_exceeds_poll_interval() -> None:
    waker = NullWaker(poll_interval=0.05)
    async with waker.listen("runs") as listener:
        assert await asyncio.wait_for(listener.wait(3600), 2) is False


async def test_wake__other_channels_do_not_wake() -> None:
    waker = NullWaker(poll_interval=0.05)
    async with waker.listen("run:a") as listener:
        waker.notify(RunFinished(run_id="b"))
        assert await listener.wait(0.01) is False


async def test_wake__cancel_racing_a_hint_is_not_swallowed() -> None:
    # A worker's helper loop waits in listener.wait() and is canceled on shutdown; if a hint
    # lands in the same loop iteration the cancellation must still end the task (3.11's
    # asyncio.wait_for swallowed it, and the loop ran forever).
    waker = NullWaker(poll_interval=30)
    async with waker.listen("runs") as listener:
        waiting = asyncio.create_task(listener.wait(None))
        await asyncio.sleep(0)  # the task is now blocked in wait()
        listener.poke()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
