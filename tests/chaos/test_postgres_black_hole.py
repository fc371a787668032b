"""The primary black-holed under load: its connections stay open and nothing flows either way
(`PgProxy.stall()`, what a host cut off by the network looks like to a client that has data in
flight), and the synchronous standby is promoted. Every Ripple process (a worker, a webhook
dispatcher, a `ripple serve`, the test's own client) reaches Postgres through a multi-host URL
whose first host is the proxy, so each must notice on its own that the primary went silent.

Holds: calls in flight fail with `Unavailable` / 503 + `Retry-After` instead of hanging, and
succeed again on the promoted standby; every run completes; every event reaches its queue once
and its webhook; no step recorded before the black hole runs again (the step ledger lives in a
database outside the fault). Figure: time from the black hole to the first acknowledged call.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx
import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import load_settings
from ripple.subscribers import QueueTarget, WebhookTarget
from tests.chaos import restart_app
from tests.chaos import test_postgres_failover as failover
from tests.chaos.conftest import FULL, chaos_environment
from tests.chaos.figures import record
from tests.chaos.test_postgres_restart import _assert_not_rerun, _recorded_starts
from tests.chaos.test_webhook_abuse import start_dispatcher, stop_after_deliveries
from tests.e2e.conftest import REPO_ROOT, Process, base_env, free_port
from tests.e2e.resilience.conftest import Effects
from tests.e2e.resilience.procs import Workers
from tests.helpers import assert_eventually
from tests.pgproxy import PgProxy
from tests.servers import PostgresCluster, RedisProcess

pytestmark = pytest.mark.timeout(420 if FULL else 150)

#: RIPPLE_DB_TIMEOUT of the API and the test's client: the default in the full profile.
DB_TIMEOUT = 5.0 if FULL else 1.0
#: Acknowledged starts and publishes before the black hole, and again after it.
LOAD = 40 if FULL else 12
#: What an HTTP call may take before it counts as hung (far above any timeout in play).
HUNG = 60.0
TOPIC = "blackhole.order"
#: How the worker met the black hole, counted in the figures.
WORKER_EVENTS = ("run_abandoned_database_unavailable", "run_lease_lost", "run_execution_error")

receiver = failover.receiver


@pytest.fixture
async def standby(cluster: PostgresCluster) -> AsyncIterator[PostgresCluster]:
    """A streaming replica of `cluster`, which `cluster` then waits for at every commit."""
    replica = PostgresCluster(replica_of=cluster)
    replica.start()
    try:
        conn = await asyncpg.connect(cluster.url)
        try:
            await conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
            await conn.execute("SELECT pg_reload_conf()")
            await assert_eventually(
                lambda: conn.fetchval(
                    "SELECT count(*) = 1 FROM pg_stat_replication WHERE sync_state = 'sync'"
                ),
                timeout=30,
            )
        finally:
            await conn.close()
        yield replica
    finally:
        replica.remove()


@pytest.fixture
async def hole(cluster: PostgresCluster) -> AsyncIterator[PgProxy]:
    """The proxy in front of the primary that the test black-holes."""
    started = await PgProxy(cluster.url).start()
    try:
        yield started
    finally:
        await started.close()


@pytest.fixture
def blackhole_url(hole: PgProxy, standby: PostgresCluster) -> str:
    return (
        f"postgresql://postgres@127.0.0.1:{hole.port},127.0.0.1:{standby.port}/postgres"
        "?target_session_attrs=read-write"
    )


@pytest.fixture
def chaos_env(blackhole_url: str, own_redis: RedisProcess, database_url: str) -> dict[str, str]:
    return chaos_environment(
        blackhole_url,
        RIPPLE_REDIS_URL=own_redis.url,
        RIPPLE_DB_TIMEOUT=str(DB_TIMEOUT),
        RIPPLE_WEBHOOK_ALLOWED_NETWORKS="127.0.0.1/32",
        # The ledger of step executions, on the shared server: outside the fault.
        EFFECTS_DATABASE_URL=database_url,
    )


@pytest.fixture
async def chaos_client(chaos_env: dict[str, str]) -> AsyncIterator[Client]:
    settings = load_settings(
        database_url=chaos_env["RIPPLE_DATABASE_URL"],
        redis_url=chaos_env["RIPPLE_REDIS_URL"],
        redis_prefix=chaos_env["RIPPLE_REDIS_PREFIX"],
        poll_interval=0.2,
        db_timeout=DB_TIMEOUT,
        webhook_allowed_networks=chaos_env["RIPPLE_WEBHOOK_ALLOWED_NETWORKS"],
        pool_min_size=2,
        pool_max_size=10,
    )
    async with Client(settings=settings) as client:  # applies the migrations
        yield client


@pytest.fixture
async def api(
    chaos_env: dict[str, str], chaos_client: Client, tmp_path: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, Process]]:
    """A `ripple serve` on the multi-host URL (started after the client migrated). Waited for
    without blocking the loop: the proxy it connects through runs on this loop."""
    port = free_port()
    env = base_env(**chaos_env, RIPPLE_LOG_LEVEL="warning")
    process = Process(
        ["serve", "--host", "127.0.0.1", "--port", str(port)], env, REPO_ROOT, tmp_path / "log"
    )
    http = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=HUNG)

    async def healthy() -> bool:
        process.check_alive()
        try:
            return (await http.get("/healthz", timeout=2.0)).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        await assert_eventually(healthy, timeout=90, interval=0.1)
        yield http, process
    finally:
        await http.aclose()
        process.stop()


class Load:
    """Python starts, publishes (fanned out to a queue and a webhook) and REST starts, each
    retried with its key until acknowledged, until `stop`."""

    def __init__(self, client: Client, http: httpx.AsyncClient) -> None:
        self.client = client
        self.http = http
        self.started: dict[str, str] = {}
        self.published: dict[int, str] = {}
        self.refused: Counter[str] = Counter()  # Python calls refused, by error type
        self.answers: Counter[str] = Counter()  # REST answers by status once the hole opened
        self.missing_retry_after = 0
        self.stop = asyncio.Event()
        self.holed_at: float | None = None
        self.first_commit_after: float | None = None

    def run(self) -> list[asyncio.Task[None]]:
        return [asyncio.create_task(t()) for t in (self.starter, self.publisher, self.rest)]

    def _acknowledged(self, began: float) -> None:
        """Note the first acknowledgement of a call made after the black hole."""
        if self.holed_at is not None and began >= self.holed_at and self.first_commit_after is None:
            self.first_commit_after = time.monotonic() - self.holed_at

    async def starter(self) -> None:
        n = 0
        while not self.stop.is_set():
            key = f"start-{n}"
            handle, began = await failover._retried(
                lambda k=key: self.client.start(restart_app.paced, idempotency_key=k),
                self.refused,
            )
            self.started[key] = handle.run_id
            self._acknowledged(began)
            n += 1
            await asyncio.sleep(0.05)

    async def publisher(self) -> None:
        n = 0
        while not self.stop.is_set():
            result, began = await failover._retried(
                lambda i=n: self.client.publish(TOPIC, {"n": i}, idempotency_key=f"order-{i}"),
                self.refused,
            )
            self.published[n] = result.event_id
            self._acknowledged(began)
            n += 1
            await asyncio.sleep(0.05)

    async def rest(self) -> None:
        n = 0
        while not self.stop.is_set():
            key = f"rest-{n}"
            began = time.monotonic()
            response = await self.http.post(
                "/v1/workflows/paced/runs", json={"input": None, "idempotencyKey": key}
            )
            if self.holed_at is not None:
                self.answers[str(response.status_code)] += 1
            if response.status_code == 503:
                self.missing_retry_after += "retry-after" not in response.headers
                await asyncio.sleep(0.1)
                continue  # the same key again
            assert response.status_code in (200, 201), response.text
            self.started[key] = response.json()["runId"]
            self._acknowledged(began)
            n += 1
            await asyncio.sleep(0.05)


async def _statuses(client: Client, run_ids: list[str]) -> Counter[str]:
    rows = await client.pool.fetch(
        "SELECT status FROM ripple_runs WHERE run_id = ANY($1::text[])", run_ids
    )
    return Counter(row["status"] for row in rows)


async def _drain_queue(client: Client, queue: str) -> list[int]:
    """Every message's `n` in `queue`, acked."""
    bodies: list[int] = []
    while batch := await client.queues.receive(queue, max_messages=100):
        bodies += [int(m.body["n"]) for m in batch]
        for message in batch:
            await client.queues.ack(queue, message.receipt)
    return bodies


async def test_postgres_black_hole__every_process_moves_to_the_promoted_standby(
    chaos_client: Client,
    chaos_effects: Effects,
    chaos_workers: Workers,
    chaos_env: dict[str, str],
    standby: PostgresCluster,
    hole: PgProxy,
    api: tuple[httpx.AsyncClient, Process],
    receiver: tuple[str, Counter[int]],
) -> None:
    http, server = api
    hook, delivered = receiver
    worker = await chaos_workers.start(concurrency=20, app="tests.chaos.restart_app")
    dispatcher = await start_dispatcher(chaos_env)
    await chaos_client.subscribe("blackhole.#", QueueTarget("ledger"))
    await chaos_client.subscribe("blackhole.#", WebhookTarget(hook))
    load = Load(chaos_client, http)
    tasks = load.run()
    try:
        await assert_eventually(
            lambda: len(load.started) >= 2 * LOAD and len(load.published) >= LOAD, timeout=120
        )
        protected = await _recorded_starts(chaos_client, chaos_effects)
        before = (len(load.started), len(load.published))
        hole.stall()  # connections stay open, nothing flows: the primary went silent
        load.holed_at = time.monotonic()
        await asyncio.to_thread(standby.promote)
        await assert_eventually(
            lambda: (
                len(load.started) >= before[0] + 2 * LOAD
                and len(load.published) >= before[1] + LOAD
            ),
            timeout=180,
        )
    finally:
        load.stop.set()
        await asyncio.gather(*tasks)

    run_ids = list(set(load.started.values()))

    async def all_done() -> bool:
        statuses = await _statuses(chaos_client, run_ids)
        return statuses.total() == len(run_ids) and not any(s in failover.ACTIVE for s in statuses)

    await assert_eventually(all_done, timeout=180, interval=0.2)
    statuses = await _statuses(chaos_client, run_ids)
    failed = await chaos_client.pool.fetch(
        "SELECT run_id, error::text FROM ripple_runs WHERE run_id = ANY($1::text[]) "
        "AND status <> 'completed' LIMIT 3",
        run_ids,
    )
    assert statuses == Counter({"completed": len(run_ids)}), (statuses, failed)
    assert load.missing_retry_after == 0, "503 without Retry-After"
    bodies = await _drain_queue(chaos_client, "ledger")
    assert sorted(bodies) == sorted(load.published), "queue fan-out lost or duplicated events"
    await stop_after_deliveries(dispatcher, load.published, delivered)
    await _assert_not_rerun(chaos_client, chaos_effects, protected, "the black hole")
    assert worker.proc.returncode is None, worker.stderr[-10:]
    server.check_alive()
    assert load.first_commit_after is not None
    record(
        "postgres-black-hole",
        lost=0,
        duplicated=0,
        recovery=f"first commit {load.first_commit_after:.1f}s after the black hole",
        during_outage={**load.refused, **{f"rest {k}": v for k, v in load.answers.items()}},
        starts=len(load.started),
        publishes=len(load.published),
        webhooks_resent=sum(n - 1 for n in delivered.values()),
        worker_events=dict(
            Counter(line["event"] for line in worker.logs() if line.get("event") in WORKER_EVENTS)
        ),
    )
