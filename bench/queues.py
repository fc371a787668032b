"""Queue benchmark: send→receive→ack throughput with 4 consumers, batches of 100; then the fair
receive against the plain one on a queue with one big group and many small ones.

Baseline: bare asyncpg sending the same batches, then `SKIP LOCKED` receive plus delete. Each
figure is the median of ROUNDS alternating rounds, printed with the baseline's; for both it
prints the CPU per message of Postgres and of the client process, and how busy the machine
was: what bounds the end-to-end figure.
"""

from __future__ import annotations

import asyncio
import statistics
import time

from bench.bare_pg import QueueRates, queue_roundtrip
from bench.common import (
    bench_database,
    machine_cpu,
    parent_pid,
    postgres_cpu_seconds,
    report,
    report_vs,
)
from ripple.platform.client import Client
from ripple.subscribers.queues.queues import OutgoingMessage

MESSAGES = 50_000
BATCH = 100
CONSUMERS = 4
#: Rounds of Ripple then bare, each over MESSAGES; the figures are the medians, because
#: autovacuum of the hot queue table lands in one side's round or the other's and moves a
#: single round's end-to-end ratio far more than the send and receive+ack phases.
ROUNDS = 3


async def run() -> None:
    ripple: list[QueueRates] = []
    bare: list[QueueRates] = []
    cpu: dict[str, list[str]] = {"ripple": [], "bare": []}
    async with bench_database(pool_max_size=20) as db, Client(settings=db.settings) as client:
        postmaster = parent_pid(await client.pool.fetchval("SELECT pg_backend_pid()"))
        for _ in range(ROUNDS):
            used = _Cpu(postmaster)
            ripple.append(await _ripple_round(client))
            cpu["ripple"].append(used.since())
            used = _Cpu(postmaster)
            bare.append(
                await queue_roundtrip(db.url, MESSAGES, BATCH, CONSUMERS, db.settings.pool_max_size)
            )
            cpu["bare"].append(used.since())
    report_vs(
        "queue send (batches of 100)",
        statistics.median(r.send for r in ripple),
        statistics.median(r.send for r in bare),
        "msgs/s",
    )
    report_vs(
        "queue receive+ack (4 consumers, batches of 100)",
        statistics.median(r.drain for r in ripple),
        statistics.median(r.drain for r in bare),
        "msgs/s",
    )
    spread = " vs ".join("/".join(f"{r.total:,.0f}" for r in side) for side in (ripple, bare))
    report_vs(
        "queue send→receive→ack end to end",
        statistics.median(r.total for r in ripple),
        statistics.median(r.total for r in bare),
        "msgs/s",
        f"medians of {ROUNDS} alternating rounds of {MESSAGES:,} ({spread})",
    )
    report(
        "  CPU per message",
        f"{_at_median(ripple, cpu['ripple'])}; bare asyncpg: {_at_median(bare, cpu['bare'])}",
    )
    await _fairness()


#: The fairness rounds: a big group's backlog, small groups of SMALL_EACH messages, batches of
#: FAIR_BATCH, and the messages each round receives and acks.
BIG_GROUP = 20_000
SMALL_GROUPS = 100
SMALL_EACH = 10
FAIR_BATCH = 10
FAIR_RECEIVED = 2_000


async def _fairness() -> None:
    rounds = {}
    for fair in (False, True):
        async with bench_database() as db, Client(settings=db.settings) as client:
            rounds[fair] = await _grouped_round(client, fair=fair)
    (plain_rate, plain_ms, plain_turns), (fair_rate, fair_ms, fair_turns) = (
        rounds[False],
        rounds[True],
    )
    report_vs(
        "queue fair receive+ack, 1 big + 100 small groups",
        fair_rate,
        plain_rate,
        "msgs/s",
        f"the baseline is the plain receive; {BIG_GROUP:,} messages in the big group, "
        f"{SMALL_EACH} in each small one, batches of {FAIR_BATCH}",
    )
    report(
        "  per receive; batches until all groups served",
        f"fair {fair_ms:.1f} ms, plain {plain_ms:.1f} ms; fair {fair_turns}, plain {plain_turns}",
    )


async def _grouped_round(client: Client, *, fair: bool) -> tuple[float, float, int]:
    """(msgs/s, ms per receive, batches until every group gave a message) over FAIR_RECEIVED
    messages received and acked one batch at a time."""
    queues = client.queues
    for start in range(0, BIG_GROUP, 1000):
        await queues.send_batch(
            "fair", [OutgoingMessage({"n": n}, group_id="big") for n in range(start, start + 1000)]
        )
    small = [
        OutgoingMessage({"n": n}, group_id=f"small-{g}")
        for g in range(SMALL_GROUPS)
        for n in range(SMALL_EACH)
    ]
    for start in range(0, len(small), 1000):
        await queues.send_batch("fair", small[start : start + 1000])
    served: set[str | None] = set()
    turns = 0
    batches = received = 0
    started = time.perf_counter()
    while received < FAIR_RECEIVED:
        msgs = await queues.receive("fair", max_messages=FAIR_BATCH, fair=fair)
        batches += 1
        served.update(m.group_id for m in msgs)
        if not turns and len(served) == SMALL_GROUPS + 1:
            turns = batches
        await queues.ack_batch("fair", [m.receipt for m in msgs])
        received += len(msgs)
    elapsed = time.perf_counter() - started
    return received / elapsed, elapsed / batches * 1000, turns


def _at_median(rates: list[QueueRates], cpu: list[str]) -> str:
    """The CPU line of the round with the median end-to-end rate."""
    order = sorted(range(len(rates)), key=lambda i: rates[i].total)
    return cpu[order[len(order) // 2]]


async def _ripple_round(client: Client) -> QueueRates:
    """One round through Ripple's queue API: send, then receive+ack with CONSUMERS."""
    queues = client.queues
    body = {"order": 1, "items": [1, 2, 3]}
    started = time.perf_counter()
    for start in range(0, MESSAGES, BATCH):
        await queues.send_batch("bench", [body] * min(BATCH, MESSAGES - start))
    sent = time.perf_counter()
    received = 0

    async def consumer() -> None:
        nonlocal received
        while True:
            msgs = await queues.receive("bench", max_messages=BATCH, visibility_timeout=30)
            if not msgs:
                return
            await queues.ack_batch("bench", [m.receipt for m in msgs])
            received += len(msgs)

    await asyncio.gather(*(consumer() for _ in range(CONSUMERS)))
    done = time.perf_counter()
    assert received == MESSAGES, f"received {received} of {MESSAGES}"
    return QueueRates(
        MESSAGES / (sent - started), MESSAGES / (done - sent), MESSAGES / (done - started)
    )


class _Cpu:
    """CPU used since creation: Postgres's and this process's per message, and the machine's
    busy share (near 100 %: the two cores, not a wait, bound the figure)."""

    def __init__(self, postmaster: int | None) -> None:
        self._postmaster = postmaster
        self._pg = postgres_cpu_seconds(postmaster)
        self._own = time.process_time()
        self._machine = machine_cpu()

    def since(self) -> str:
        pg = (postgres_cpu_seconds(self._postmaster) - self._pg) / MESSAGES
        own = (time.process_time() - self._own) / MESSAGES
        busy, total = (b - a for a, b in zip(self._machine, machine_cpu(), strict=True))
        return (
            f"Postgres {pg * 1e6:.0f} µs, client {own * 1e6:.0f} µs "
            f"(machine {busy / total:.0%} busy)"
        )
