"""The caller's deadline while every Postgres process is frozen (SIGSTOP): starts and publishes
(Python and REST, group-committed), signals, queue sends and reads of a run are each answered
within `RIPPLE_DB_TIMEOUT` + 1 s, with their outcome or `Unavailable` / 503 + `Retry-After`.
None is lost or doubled: after the thaw each idempotency key, retried once, resolves to exactly
one run, event, signal or message, the one a call that succeeded returned.

The one latency bar here is the documented one (answered within the timeout plus a generous
second); `asyncio.wait_for` bounds are hang guards, not timing assertions.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import load_settings
from ripple.platform.errors import Unavailable
from ripple.subscribers import QueueTarget
from tests.chaos.conftest import FULL, Profile
from tests.chaos.figures import p50_max, record
from tests.e2e.conftest import REPO_ROOT, Process, base_env, free_port, wait_healthy
from tests.servers import PostgresCluster

#: RIPPLE_DB_TIMEOUT of the test: the default in the full profile, as in production.
DB_TIMEOUT = 5.0 if FULL else 1.0
#: The promise under test: every call is answered within this many seconds.
ANSWER_BOUND = DB_TIMEOUT + 1.0
#: Calls of each kind made while Postgres is frozen.
PER_KIND = 40 if FULL else 12
#: Hang guard of one call (without the deadline, calls wait for the thaw).
GUARD = 60.0
pytestmark = pytest.mark.timeout(240 if FULL else 60)
WORKFLOW = "frozen-deadline"
TOPIC = "frozen.order.created"
QUEUE = "frozen-sends"


@dataclass
class Call:
    """One call made during the freeze: its kind, key, how long it took and what it answered."""

    kind: str
    key: str
    took: float = 0.0
    #: "ok", "Unavailable" (Python) or the HTTP status (REST).
    outcome: str = ""
    #: The run id, event id or message id the call answered with (when "ok").
    value: str | None = None


@pytest.fixture
async def frozen_client(cluster: PostgresCluster) -> AsyncIterator[Client]:
    settings = load_settings(
        database_url=cluster.url,
        db_timeout=DB_TIMEOUT,
        poll_interval=0.2,
        pool_min_size=10,
        pool_max_size=10,
    )
    async with Client(settings=settings) as client:  # applies the migrations
        yield client


@pytest.fixture
def frozen_api(
    cluster: PostgresCluster, frozen_client: Client, tmp_path: Path
) -> Iterator[httpx.AsyncClient]:
    """A `ripple serve` subprocess on the cluster (after the client migrated it)."""
    port = free_port()
    env = base_env(
        RIPPLE_DATABASE_URL=cluster.url,
        RIPPLE_DB_TIMEOUT=str(DB_TIMEOUT),
        RIPPLE_POOL_MIN_SIZE="10",
        RIPPLE_POOL_MAX_SIZE="10",
        RIPPLE_LOG_LEVEL="warning",
    )
    args = ["serve", "--host", "127.0.0.1", "--port", str(port)]
    process = Process(args, env, REPO_ROOT, tmp_path / "serve.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield httpx.AsyncClient(base_url=url, timeout=GUARD)
    finally:
        process.stop()


class Caller:
    """Makes the calls of each kind with their idempotency keys, once or again."""

    def __init__(self, client: Client, http: httpx.AsyncClient, target_run: str) -> None:
        self.client = client
        self.http = http
        self.target_run = target_run

    def call(self, kind: str, key: str) -> Callable[[], Awaitable[tuple[str, str | None]]]:
        return {
            "start": self._start,
            "rest-start": self._rest_start,
            "publish": self._publish,
            "rest-publish": self._rest_publish,
            "signal": self._signal,
            "queue-send": self._send,
            "read": self._read,
            "rest-read": self._rest_read,
        }[kind](key)

    def _start(self, key: str) -> Callable[[], Awaitable[tuple[str, str | None]]]:
        async def go() -> tuple[str, str | None]:
            handle = await self.client.start(WORKFLOW, {"key": key}, idempotency_key=key)
            return "ok", handle.run_id

        return go

    def _publish(self, key: str) -> Callable[[], Awaitable[tuple[str, str | None]]]:
        async def go() -> tuple[str, str | None]:
            result = await self.client.publish(TOPIC, {"key": key}, key)
            return "ok", result.event_id

        return go

    def _signal(self, key: str) -> Callable[[], Awaitable[tuple[str, str | None]]]:
        async def go() -> tuple[str, str | None]:
            await self.client.signal(self.target_run, "poke", {"key": key}, idempotency_key=key)
            return "ok", None

        return go

    def _send(self, key: str) -> Callable[[], Awaitable[tuple[str, str | None]]]:
        async def go() -> tuple[str, str | None]:
            message_id = await self.client.queues.send(QUEUE, {"key": key}, deduplication_id=key)
            return "ok", message_id

        return go

    def _read(self, key: str) -> Callable[[], Awaitable[tuple[str, str | None]]]:
        async def go() -> tuple[str, str | None]:
            run = await self.client.get_run(self.target_run)
            assert run is not None
            return "ok", run.run_id

        return go

    def _rest_read(self, key: str) -> Callable[[], Awaitable[tuple[str, str | None]]]:
        async def go() -> tuple[str, str | None]:
            return _rest_outcome(await self.http.get(f"/v1/runs/{self.target_run}"), 200, "runId")

        return go

    def _rest_start(self, key: str) -> Callable[[], Awaitable[tuple[str, str | None]]]:
        async def go() -> tuple[str, str | None]:
            body = {"input": {"key": key}, "idempotencyKey": key}
            answer = await self.http.post(f"/v1/workflows/{WORKFLOW}/runs", json=body)
            return _rest_outcome(answer, 201, "runId")

        return go

    def _rest_publish(self, key: str) -> Callable[[], Awaitable[tuple[str, str | None]]]:
        async def go() -> tuple[str, str | None]:
            body = {"payload": {"key": key}, "idempotencyKey": key}
            answer = await self.http.post(f"/v1/topics/{TOPIC}/events", json=body)
            return _rest_outcome(answer, 202, "eventId")

        return go


def _rest_outcome(answer: httpx.Response, ok: int, field: str) -> tuple[str, str | None]:
    if answer.status_code == ok:
        return "ok", str(answer.json()[field])
    assert answer.status_code == 503, answer.text  # the only other answer a freeze may give
    assert answer.headers["retry-after"] == "1"
    assert "RIPPLE_DB_TIMEOUT" in answer.json()["detail"]
    return "503", None


async def _timed(call: Call, go: Callable[[], Awaitable[tuple[str, str | None]]]) -> None:
    began = time.monotonic()
    try:
        call.outcome, call.value = await asyncio.wait_for(go(), GUARD)
    except Unavailable:
        call.outcome = "Unavailable"
    finally:
        call.took = time.monotonic() - began


KINDS = ("start", "rest-start", "publish", "rest-publish", "signal", "queue-send")
#: Reads: answered in time too; nothing to resolve by key afterwards.
READS = ("read", "rest-read")


async def test_frozen_postgres__every_call_answers_by_its_deadline_and_keys_resolve_once(
    frozen_client: Client,
    frozen_api: httpx.AsyncClient,
    cluster: PostgresCluster,
    profile: Profile,
) -> None:
    """Every Postgres process frozen for longer than RIPPLE_DB_TIMEOUT while calls of every
    kind arrive: each is answered (its outcome, or Unavailable / 503 with Retry-After) within
    the timeout + 1 s, never at the thaw; retried once with its key after the thaw, each key
    names exactly one run / event / signal / message, the one a call that succeeded returned.
    (Group-committed calls used to queue behind a batch stuck until the thaw, and a timed-out
    statement's connection was held until the frozen server acknowledged its cancel.)"""
    client = frozen_client
    await client.subscribe("frozen.#", QueueTarget("frozen-events"))
    target = await client.start("frozen-inbox", {})
    async with frozen_api as http:
        caller = Caller(client, http, target.run_id)
        for kind in KINDS + READS:  # warm: each path has run once, its connections are open
            outcome, _ = await caller.call(kind, f"warm-{kind}")()
            assert outcome == "ok"
        freeze_for = max(profile.stall, 2 * DB_TIMEOUT + 1)
        kinds = KINDS + READS
        calls = [Call(kind, f"{kind}-{n}") for n in range(PER_KIND) for kind in kinds]
        spacing = (freeze_for - DB_TIMEOUT) / len(calls)
        frozen = cluster.freeze()
        froze_at = time.monotonic()
        tasks = []
        try:
            for call in calls:  # arriving all through the freeze, not only at its start
                tasks.append(asyncio.create_task(_timed(call, caller.call(call.kind, call.key))))
                await asyncio.sleep(spacing)
            await asyncio.sleep(max(0.0, freeze_for - (time.monotonic() - froze_at)))
        finally:
            cluster.thaw(frozen)
        frozen_s = time.monotonic() - froze_at
        await asyncio.gather(*tasks)

        slow = [(c.kind, c.key, round(c.took, 2)) for c in calls if c.took > ANSWER_BOUND]
        assert not slow, f"answered later than {ANSWER_BOUND}s: {slow}"
        during = Counter(c.outcome for c in calls)
        assert set(during) <= {"ok", "Unavailable", "503"}, during
        assert during["Unavailable"] + during["503"] > 0  # the freeze was felt

        # After the thaw, each key retried once resolves to its one outcome.
        duplicated = lost = 0
        for call in calls:
            outcome, value = await asyncio.wait_for(caller.call(call.kind, call.key)(), GUARD)
            assert outcome == "ok", (call, outcome)
            if call.outcome == "ok" and value != call.value:
                duplicated += 1
        counts = await _counts_per_key(client, target.run_id)
        for call in calls:
            if call.kind in READS:
                continue
            n = counts[call.kind].get(call.key, 0)
            lost += n == 0
            duplicated += max(0, n - 1)
    took = [c.took for c in calls]
    record(
        "frozen-deadlines",
        lost=lost,
        duplicated=duplicated,
        during_outage=dict(during),
        calls=len(calls),
        db_timeout_s=DB_TIMEOUT,
        frozen_s=f"{frozen_s:.1f}",
        answered_p50_max=p50_max(took),
    )
    assert (lost, duplicated) == (0, 0)


async def _counts_per_key(client: Client, inbox_run: str) -> dict[str, dict[str, int]]:
    """Rows per idempotency key, by call kind (REST and Python calls share their tables)."""
    runs = await client.pool.fetch(
        "SELECT idempotency_key AS key, count(*) AS n FROM ripple_runs WHERE workflow = $1 "
        "GROUP BY 1",
        WORKFLOW,
    )
    events = await client.pool.fetch(
        "SELECT e.idempotency_key AS key, count(DISTINCT e.id) AS n, count(m.id) AS messages "
        "FROM ripple_events e LEFT JOIN ripple_queue_messages m "
        "ON m.queue = 'frozen-events' AND m.headers->>'eventId' = e.id::text "
        "WHERE e.topic = $1 GROUP BY 1",
        TOPIC,
    )
    for row in events:  # each event fanned out to its one queue subscription exactly once
        assert row["messages"] == row["n"], dict(row)
    signals = await client.pool.fetch(
        "SELECT payload->>'key' AS key, count(*) AS n FROM ripple_signals WHERE run_id = $1 "
        "GROUP BY 1",
        inbox_run,
    )
    sends = await client.pool.fetch(
        "SELECT deduplication_id AS key, count(*) AS n FROM ripple_queue_messages "
        "WHERE queue = $1 GROUP BY 1",
        QUEUE,
    )

    def by_key(rows: list[Any]) -> dict[str, int]:
        return {row["key"]: int(row["n"]) for row in rows}

    return {
        "start": by_key(runs),
        "rest-start": by_key(runs),
        "publish": by_key(events),
        "rest-publish": by_key(events),
        "signal": by_key(signals),
        "queue-send": by_key(sends),
    }
