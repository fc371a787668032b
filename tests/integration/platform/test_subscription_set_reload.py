"""The compiled subscription set under concurrent readers and changes: every reader gets a set,
also when a change hint clears the cached one while a reload is under way."""

from __future__ import annotations

import asyncio

from ripple.platform.client import Client
from ripple.subscribers import QueueTarget


async def test_explain_during_subscription_changes__every_call_answers(client: Client) -> None:
    await client.subscribe("race.*", QueueTarget("race-0"))
    stop = asyncio.Event()

    async def change() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            sub = await client.subscribe("race.#", QueueTarget(f"race-{n}"))
            await client.unsubscribe(sub.id)

    async def explain() -> int:
        answers = 0
        for _ in range(150):
            explanation = await client.explain("race.created", {"n": 1})
            assert explanation is not None
            answers += 1
        return answers

    changer = asyncio.create_task(change())
    try:
        counts = await asyncio.gather(*(explain() for _ in range(8)))
    finally:
        stop.set()
        await changer
    assert counts == [150] * 8
