"""Queue benchmark: send→receive→ack throughput with 4 consumers, batches of 100.

Baseline: bare asyncpg sending the same batches, then `SKIP LOCKED` receive plus delete. For
both it prints the CPU per message of Postgres and of the client process, and how busy the
machine was: what bounds the end-to-end figure.
"""

from __future__ import annotations

import asyncio
import time

from bench.bare_pg import queue_roundtrip
from bench.common import (
    bench_database,
    machine_cpu,
    parent_pid,
    postgres_cpu_seconds,
    report,
    report_vs,
)
from ripple.platform.client import Client

MESSAGES = 50_000
BATCH = 100
CONSUMERS = 4
#: Rounds of Ripple then bare, each over MESSAGES; the figures are the medians. One round read
#: 72-105 % of bare for the same code, and each phase alone 94-96 %: autovacuum of the hot
#: queue table lands in one side's round or the other's.
ROUNDS = 3


async def run() -> None:
    rounds: list[tuple[float, float, float, str]] = []
    bares: list[tuple[float, str]] = []
    async with bench_database(pool_max_size=20) as db, Client(settings=db.settings) as client:
        postmaster = parent_pid(await client.pool.fetchval("SELECT pg_backend_pid()"))
        for _ in range(ROUNDS):
            rounds.append(await _ripple_round(client, postmaster))
            cpu = _Cpu(postmaster)
            bare = await queue_roundtrip(
                db.url, MESSAGES, BATCH, CONSUMERS, db.settings.pool_max_size
            )
            bares.append((bare, cpu.since()))
    send, drain, total, ripple_cpu = sorted(rounds, key=lambda r: r[2])[ROUNDS // 2]
    bare, bare_cpu = sorted(bares)[ROUNDS // 2]
    report("queue send (batches of 100)", f"{send:,.0f} msgs/s")
    report("queue receive+ack (4 consumers, batches of 100)", f"{drain:,.0f} msgs/s")
    spread = (
        "/".join(f"{r[2]:,.0f}" for r in rounds) + " vs " + "/".join(f"{b:,.0f}" for b, _ in bares)
    )
    report_vs(
        "queue send→receive→ack end to end",
        total,
        bare,
        "msgs/s",
        f"medians of {ROUNDS} alternating rounds of {MESSAGES:,} ({spread})",
    )
    report("  CPU per message", f"{ripple_cpu}; bare asyncpg: {bare_cpu}")


async def _ripple_round(client: Client, postmaster: int | None) -> tuple[float, float, float, str]:
    """One round through Ripple's queue API: send, receive+ack and end-to-end msgs/s, and the
    CPU it took."""
    queues = client.queues
    body = {"order": 1, "items": [1, 2, 3]}
    cpu = _Cpu(postmaster)
    started = time.perf_counter()
    for start in range(0, MESSAGES, BATCH):
        await queues.send_batch("bench", [body] * min(BATCH, MESSAGES - start))
    sent = time.perf_counter() - started
    received = 0

    async def consumer() -> None:
        nonlocal received
        while True:
            msgs = await queues.receive("bench", max_messages=BATCH, visibility_timeout=30)
            if not msgs:
                return
            await queues.ack_batch("bench", [m.receipt for m in msgs])
            received += len(msgs)

    t0 = time.perf_counter()
    await asyncio.gather(*(consumer() for _ in range(CONSUMERS)))
    drained = time.perf_counter() - t0
    total = time.perf_counter() - started
    assert received == MESSAGES, f"received {received} of {MESSAGES}"
    return MESSAGES / sent, received / drained, MESSAGES / total, cpu.since()


class _Cpu:
    """CPU used since creation: Postgres's and this process's per message, and the machine's
    busy share (near 100 %: the two cores, not a wait, bound the figure)."""

    def __init__(self, postmaster: int | None) -> None:
        self._postmaster = postmaster
        self._pg = self._pg_seconds()
        self._own = time.process_time()
        self._machine = machine_cpu()

    def _pg_seconds(self) -> float:
        return postgres_cpu_seconds(self._postmaster) if self._postmaster else float("nan")

    def since(self) -> str:
        pg = (self._pg_seconds() - self._pg) / MESSAGES
        own = (time.process_time() - self._own) / MESSAGES
        busy, total = (b - a for a, b in zip(self._machine, machine_cpu(), strict=True))
        return (
            f"Postgres {pg * 1e6:.0f} µs, client {own * 1e6:.0f} µs "
            f"(machine {busy / total:.0%} busy)"
        )
