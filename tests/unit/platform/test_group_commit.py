"""`GroupCommit`: batching of concurrent requests, failure isolation, no lost requests."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from ripple.platform.core.group_commit import GroupCommit
from ripple.platform.errors import InvalidInput, Unavailable
from tests.helpers import assert_eventually


class Recorder:
    """A writer that records its batches; while `gate` is clear it holds the batch open."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.refuse: set[int] = set()
        self.outage = False

    async def write(self, batch: list[int]) -> list[int | BaseException]:
        self.batches.append(list(batch))
        await self.gate.wait()
        if self.outage:
            raise Unavailable("database down")
        if self.refuse & set(batch):
            raise InvalidInput(f"refused {sorted(self.refuse & set(batch))}")
        return [n * 10 if n >= 0 else ValueError(f"negative {n}") for n in batch]


async def test_group_commit__idle_request_goes_alone_and_at_once() -> None:
    writer = Recorder()
    group = GroupCommit(writer.write, name="t")
    assert await group.submit(1) == 10
    assert writer.batches == [[1]]


async def test_group_commit__requests_arriving_during_a_batch_go_together_next() -> None:
    writer = Recorder()
    writer.gate.clear()
    group = GroupCommit(writer.write, name="t")
    first = asyncio.ensure_future(group.submit(1))
    await asyncio.sleep(0)
    later = [asyncio.ensure_future(group.submit(n)) for n in range(2, 6)]
    await asyncio.sleep(0)
    writer.gate.set()
    assert await asyncio.gather(first, *later) == [10, 20, 30, 40, 50]
    assert writer.batches == [[1], [2, 3, 4, 5]]
    assert (group.batches, group.written) == (2, 5)


async def test_group_commit__max_batch_splits_a_backlog() -> None:
    writer = Recorder()
    writer.gate.clear()
    group = GroupCommit(writer.write, name="t", max_batch=2)
    futures = [asyncio.ensure_future(group.submit(n)) for n in range(5)]
    await asyncio.sleep(0)
    writer.gate.set()
    await asyncio.gather(*futures)
    assert writer.batches == [[0, 1], [2, 3], [4]]


async def _settle() -> None:
    """Let every ready task run to its next wait."""
    for _ in range(5):
        await asyncio.sleep(0)


async def test_group_commit__another_batch_goes_in_flight_only_once_spill_requests_wait() -> None:
    writer = Recorder()
    writer.gate.clear()
    group = GroupCommit(writer.write, name="t", flushers=3, spill=3)
    futures = [asyncio.ensure_future(group.submit(1))]
    await _settle()
    futures += [asyncio.ensure_future(group.submit(n)) for n in (2, 3)]
    await _settle()
    assert writer.batches == [[1]]  # two waiting, below spill: they wait for the batch in flight
    futures.append(asyncio.ensure_future(group.submit(4)))
    await _settle()
    assert writer.batches == [[1], [2, 3, 4]]  # the third starts a second batch in flight
    futures.append(asyncio.ensure_future(group.submit(5)))
    await _settle()
    assert writer.batches == [[1], [2, 3, 4]]  # a new group gathers again
    writer.gate.set()
    assert await asyncio.gather(*futures) == [10, 20, 30, 40, 50]
    assert writer.batches == [[1], [2, 3, 4], [5]]


async def test_group_commit__a_refused_batch_is_retried_one_by_one() -> None:
    writer = Recorder()
    writer.refuse = {3}
    group = GroupCommit(writer.write, name="t")
    writer.gate.clear()
    futures = [asyncio.ensure_future(group.submit(n)) for n in (1, 2, 3, -4)]
    await asyncio.sleep(0)
    writer.gate.set()
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert results[:2] == [10, 20]
    assert isinstance(results[2], InvalidInput)
    assert isinstance(results[3], ValueError)  # a per-request outcome, not a batch failure


async def test_group_commit__an_outage_fails_the_whole_batch_without_retries() -> None:
    writer = Recorder()
    writer.outage = True
    writer.gate.clear()
    group = GroupCommit(writer.write, name="t")
    futures = [asyncio.ensure_future(group.submit(n)) for n in (1, 2, 3)]
    await asyncio.sleep(0)
    writer.gate.set()
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert all(isinstance(r, Unavailable) for r in results)
    assert writer.batches == [[1, 2, 3]]  # no per-request retries


async def test_group_commit__a_request_right_after_the_drain_ends_is_not_stranded() -> None:
    writer = Recorder()
    group = GroupCommit(writer.write, name="t")

    async def twice(n: int) -> int:
        # The second submit runs as soon as the first result arrives: while the drain task
        # that delivered it is finishing (it saw an empty queue). It must start a new drain.
        await group.submit(n)
        return await group.submit(n)

    for n in range(20):
        assert await asyncio.wait_for(twice(n), 2) == n * 10


async def test_group_commit__a_canceled_waiter_leaves_the_batch_alone() -> None:
    writer = Recorder()
    writer.gate.clear()
    group = GroupCommit(writer.write, name="t")
    one = asyncio.ensure_future(group.submit(1))
    two = asyncio.ensure_future(group.submit(2))
    await asyncio.sleep(0)
    one.cancel()
    writer.gate.set()
    assert await two == 20
    with pytest.raises(asyncio.CancelledError):
        await one
    assert writer.batches == [[1, 2]]


async def test_group_commit__a_caller_timeout_holds_behind_a_stuck_batch() -> None:
    """The batch in flight never ends while the gate is shut (a frozen database): its caller
    and the one queued behind it both get Unavailable at their timeout. The queued request is
    then never written; the one in flight is, when the batch ends (its outcome unheard)."""
    writer = Recorder()
    writer.gate.clear()
    group = GroupCommit(writer.write, name="t")
    in_flight = asyncio.ensure_future(group.submit(1, timeout=0.05))
    await assert_eventually(lambda: writer.batches == [[1]])
    queued = asyncio.ensure_future(group.submit(2, timeout=0.05))
    for waiting in (in_flight, queued):
        with pytest.raises(Unavailable, match="RIPPLE_DB_TIMEOUT"):
            await waiting
    later = asyncio.ensure_future(group.submit(3))
    writer.gate.set()
    assert await later == 30
    assert writer.batches == [[1], [3]]
    assert (group.batches, group.written) == (2, 2)


async def test_group_commit__a_shorter_timeout_behind_a_longer_one_expires_on_its_own() -> None:
    writer = Recorder()
    writer.gate.clear()
    group = GroupCommit(writer.write, name="t")
    patient = asyncio.ensure_future(group.submit(1, timeout=30))
    await assert_eventually(lambda: writer.batches == [[1]])
    hasty = asyncio.ensure_future(group.submit(2, timeout=0.05))
    with pytest.raises(Unavailable):
        await asyncio.wait_for(hasty, 10)  # a hang guard: expired after 0.05 s, not 30
    assert not patient.done()
    writer.gate.set()
    assert await patient == 10
    assert writer.batches == [[1]]


async def test_group_commit__a_caller_answered_in_time_keeps_its_outcome() -> None:
    writer = Recorder()
    group = GroupCommit(writer.write, name="t")
    assert await group.submit(1, timeout=30) == 10


async def test_group_commit__any_batch_error_is_isolated_and_the_committer_keeps_going() -> None:
    """Not only RippleErrors: a batch that fails with, say, a TypeError (an entry the encoder
    cannot take) is retried request by request, logged under `refused_event`, and the next
    request is served."""
    batches: list[list[object]] = []

    async def write(batch: list[object]) -> list[object | BaseException]:
        batches.append(list(batch))
        if any(isinstance(item, set) for item in batch):
            raise TypeError("Object of type set is not JSON serializable")
        return list(batch)

    group: GroupCommit[object, object] = GroupCommit(write, name="t", refused_event="t_refused")
    with capture_logs() as logs:
        results = await asyncio.gather(
            group.submit(1), group.submit({2}), group.submit(3), return_exceptions=True
        )
    assert results[0] == 1
    assert results[2] == 3
    assert isinstance(results[1], TypeError)
    assert [e["size"] for e in logs if e["event"] == "t_refused"] == [3]
    assert batches == [[1, {2}, 3], [1], [{2}], [3]]
    assert await group.submit(4) == 4
