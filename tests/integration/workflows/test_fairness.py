"""Fairness: pending runs claimed in a weighted round robin across fairness keys."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import asyncpg
import pytest

from ripple.platform.errors import InvalidInput
from ripple.workflows import Concurrency, Fairness, WorkflowContext, store, workflow
from ripple.workflows.store import claim as claim_sql
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App

# tenant -> runs of that tenant executing now / the most seen at once
active: dict[str, int] = {}
peak: dict[str, int] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    active.clear()
    peak.clear()


@workflow(name="fair-import", fairness=Fairness(key="tenantId"))
async def fair_import(ctx: WorkflowContext, inp: dict[str, Any]) -> None:
    return None


@workflow(name="fair-weighted", fairness=Fairness(key="tenantId", weights={"x": 3}))
async def fair_weighted(ctx: WorkflowContext, inp: dict[str, Any]) -> None:
    return None


@workflow(
    name="fair-capped",
    fairness=Fairness(key="tenantId"),
    concurrency=Concurrency(limit=2, key="tenantId"),
)
async def fair_capped(ctx: WorkflowContext, inp: dict[str, Any]) -> None:
    tenant = inp["tenantId"]

    async def body() -> None:
        active[tenant] = active.get(tenant, 0) + 1
        peak[tenant] = max(peak.get(tenant, 0), active[tenant])
        try:
            await asyncio.sleep(0.01)  # a window in which overlaps would show
        finally:
            active[tenant] -= 1

    await ctx.step.run("work", body)


async def _start_many(app: App, wf: Any, tenant: str, n: int) -> list[str]:
    ids: list[str] = []
    for batch in range(0, n, 500):
        handles = await asyncio.gather(
            *(
                app.workflows.start(wf, {"tenantId": tenant, "i": i})
                for i in range(batch, min(n, batch + 500))
            )
        )
        ids += [h.run_id for h in handles]
    return ids


async def _completed(app: App, workflow: str, key: str) -> int:
    count: int = await app.pool.fetchval(
        "SELECT count(*) FROM ripple_runs "
        "WHERE workflow = $1 AND fairness_key = $2 AND status = 'completed'",
        workflow,
        key,
    )
    return count


async def _active_keys(app: App) -> int:
    total: int = await app.pool.fetchval("SELECT count(*) FROM ripple_fair_keys WHERE active")
    return total


async def _claim(conn: Any, limit: int, worker_id: str = "w") -> list[store.ClaimedRun]:
    return await store.claim_runs(
        conn,
        worker_id=worker_id,
        lease=30.0,
        limit=limit,
        pairs=[("fair-import", 1)],
        fair=["fair-import"],
    )


def test_fairness__validates_its_options() -> None:
    assert Fairness().key == "tenantId"
    with pytest.raises(InvalidInput, match="key path"):
        Fairness(key="a b")
    with pytest.raises(InvalidInput, match="weight"):
        Fairness(weights={"acme": 0})
    with pytest.raises(InvalidInput, match="weight"):
        Fairness(weights={"acme": True})
    with pytest.raises(InvalidInput, match="fairness"):
        workflow(name="x", fairness="tenantId")(fair_import.fn)  # type: ignore[call-overload]


async def test_fairness__a_small_tenant_is_not_starved_by_a_bulk_import(app: App) -> None:
    """Tenant A starts 5,000 runs, then tenant B starts 10: with a worker of concurrency 10,
    every B run completes before 10 % of A's backlog is done (FIFO would run B last)."""
    await _start_many(app, fair_import, "A", 5000)
    b_runs = [await app.workflows.start(fair_import, {"tenantId": "B", "i": i}) for i in range(10)]
    async with app.worker(fair_import, concurrency=10):
        for handle in b_runs:
            await handle.result(timeout=60)
        a_done = await _completed(app, "fair-import", "A")
    assert a_done < 500, a_done


async def test_fairness__weights_share_claims_three_to_one(app: App) -> None:
    """Keys x (weight 3) and y (weight 1), x's backlog first: over the first 800 completions
    x and y complete 3:1 (within 15 %)."""
    await _start_many(app, fair_weighted, "x", 900)
    await _start_many(app, fair_weighted, "y", 300)
    async with app.worker(fair_weighted, concurrency=10):
        await assert_eventually(
            lambda: _at_least(app, "fair-weighted", 800), timeout=120, interval=0.05
        )
    rows = await app.pool.fetch(
        "SELECT fairness_key FROM ripple_runs WHERE workflow = 'fair-weighted' "
        "AND status = 'completed' ORDER BY completed_at, run_id LIMIT 800"
    )
    x = sum(1 for r in rows if r["fairness_key"] == "x")
    y = len(rows) - x
    assert 3 * 0.85 <= x / y <= 3 * 1.15, (x, y)


async def _at_least(app: App, workflow: str, n: int) -> bool:
    done: int = await app.pool.fetchval(
        "SELECT count(*) FROM ripple_runs WHERE workflow = $1 AND status = 'completed'", workflow
    )
    return done >= n


async def test_fairness__with_concurrency_each_key_keeps_its_cap_and_its_share(app: App) -> None:
    a_runs = await _start_many(app, fair_capped, "A", 200)
    b_runs = [await app.workflows.start(fair_capped, {"tenantId": "B", "i": i}) for i in range(10)]
    async with app.worker(fair_capped, concurrency=10):
        for handle in b_runs:
            await handle.result(timeout=60)
        a_done = await _completed(app, "fair-capped", "A")
        for run_id in a_runs:
            await app.workflows.handle(run_id).result(timeout=60)
    assert peak == {"A": 2, "B": 2}
    assert a_done < 50, a_done  # B ran beside A, not after A's 200 runs
    assert await app.pool.fetchval("SELECT sum(active) FROM ripple_concurrency_slots") == 0


async def test_fairness__a_start_names_its_key_instead_of_the_inputs(app: App) -> None:
    first = await app.workflows.start(fair_import, {"tenantId": "from-input"})
    named = await app.workflows.start(fair_import, {"tenantId": "x"}, fairness_key="acme")
    missing = await app.workflows.start(fair_import, {})
    rows = await app.pool.fetch(
        "SELECT run_id, fairness_key FROM ripple_runs WHERE workflow = 'fair-import'"
    )
    keys = {r["run_id"]: r["fairness_key"] for r in rows}
    assert keys == {first.run_id: "from-input", named.run_id: "acme", missing.run_id: ""}
    with pytest.raises(InvalidInput, match="fairness_key"):
        await app.workflows.start(fair_import, {}, fairness_key=7)  # type: ignore[arg-type]


async def test_fairness__two_claimers_never_claim_a_run_twice(app: App) -> None:
    app.workflows.register(fair_import)
    ids: list[str] = []
    for key in range(30):
        ids += await _start_many(app, fair_import, f"t{key}", 10)
    claimed: list[str] = []

    async def claimer() -> None:
        async with app.pool.acquire() as conn:
            for _ in range(500):
                if len(claimed) >= len(ids):
                    return
                runs = await _claim(conn, 7, f"w{id(conn)}")
                claimed.extend(r.run_id for r in runs)
                await asyncio.sleep(0)

    await asyncio.gather(claimer(), claimer())
    assert len(claimed) == len(set(claimed))
    assert sorted(claimed) == sorted(ids)


async def test_fairness__keys_without_pending_runs_retire_and_come_back(app: App) -> None:
    app.workflows.register(fair_import)
    for key in ("a", "a", "a", "b"):
        await app.workflows.start(fair_import, {"tenantId": key})
    assert await _active_keys(app) == 2
    async with app.pool.acquire() as conn:
        assert len(await _claim(conn, 10)) == 4
        assert await _active_keys(app) == 2  # the claim could not see them empty yet
        assert await _claim(conn, 10) == []
        assert await _active_keys(app) == 0  # the next claim retired both
        passes = {r["key"]: r["pass"] for r in await conn.fetch("SELECT * FROM ripple_fair_keys")}
        assert passes == {"a": 3.0, "b": 1.0}
        # b comes back at the smallest active pass (a's, once a is back), not at its own
        again_a = await app.workflows.start(fair_import, {"tenantId": "a"})
        again_b = await app.workflows.start(fair_import, {"tenantId": "b"})
        rows = await conn.fetch("SELECT key, pass FROM ripple_fair_keys WHERE active")
        passes = {r["key"]: r["pass"] for r in rows}
        assert passes == {"a": 3.0, "b": 3.0}
        assert {r.run_id for r in await _claim(conn, 10)} == {again_a.run_id, again_b.run_id}


async def test_fairness__round_robin_order_within_priority_then_fifo(app: App) -> None:
    """Claims alternate between keys; within a key a higher priority goes first."""
    a = [await app.workflows.start(fair_import, {"tenantId": "a", "i": i}) for i in range(3)]
    urgent = await app.workflows.start(fair_import, {"tenantId": "a"}, priority=5)
    b = [await app.workflows.start(fair_import, {"tenantId": "b", "i": i}) for i in range(2)]
    async with app.pool.acquire() as conn:
        order = []
        for _ in range(6):
            (run,) = await _claim(conn, 1)
            order.append(run.run_id)
    # a's pass is 0 and b joined at 0: a (key order breaks the tie), b, a, b, a, a
    assert order == [
        urgent.run_id,
        b[0].run_id,
        a[0].run_id,
        b[1].run_id,
        a[1].run_id,
        a[2].run_id,
    ]


async def test_fairness__removing_it_hands_pending_runs_back_to_the_plain_claim(
    app: App,
) -> None:
    handle = await app.workflows.start(fair_import, {"tenantId": "a"})
    plain = workflow(name="fair-import", version=2)(fair_import.fn)
    app.workflows.register(plain)
    await app.workflows.sync_definitions()
    assert (
        await app.pool.fetchval(
            "SELECT fairness_key FROM ripple_runs WHERE run_id = $1", handle.run_id
        )
        is None
    )
    async with app.pool.acquire() as conn:
        claims, _, _ = await store.claim_runs_plain(
            conn, worker_id="w", lease=30.0, limit=10, pairs=[("fair-import", 1)]
        )
    assert [c.run_id for c in claims] == [handle.run_id]


def _buffers(plan: str) -> int:
    found = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
    assert found is not None, plan
    return int(found.group(1)) + int(found.group(2) or 0)


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "analyzed"])
async def test_fair_claim__bounded_work_whatever_the_backlog(app: App, analyzed: bool) -> None:
    """30,000 pending runs over 100 keys and 20,000 finished ones: a claim of ten probes the
    active keys' index and their heads, a few hundred buffers, not the backlog."""
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, status, completed_at) "
        "SELECT 'done-' || i, 'wf', 1, 'completed', now() FROM generate_series(1, 20000) AS i"
    )
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, fairness_key, available_at) "
        "SELECT 'due-' || i, 'wf', 1, 'k' || (i % 100), now() - i * interval '1 millisecond' "
        "FROM generate_series(1, 30000) AS i"
    )
    assert await _active_keys(app) == 100
    if analyzed:
        await app.pool.execute("ANALYZE ripple_runs")
    args = ["w", 30.0, 10, ["wf"], ["wf"], [1], False, ["wf"]]
    sqls = [claim_sql._CLAIM_FAIR, claim_sql._CLAIM_FAIR_PLAIN, claim_sql._CLAIM_FAIR_QUICK]
    for served, sql in enumerate(sqls, 1):
        rows = await app.pool.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, *args)
        plan = "\n".join(r[0] for r in rows)
        assert "ripple_runs_fair" in plan, plan
        assert "Seq Scan on ripple_runs" not in plan, plan
        assert _buffers(plan) < 600, plan
        # all passes were equal: each claim of ten served its keys a turn of FAIR_QUANTUM runs
        passes = await app.pool.fetch("SELECT pass FROM ripple_fair_keys WHERE pass > 0")
        turns = 10 // claim_sql.FAIR_QUANTUM
        assert [r["pass"] for r in passes] == [claim_sql.FAIR_QUANTUM] * turns * served


async def _fill_keys(app: App, prefix: str, keys: int, runs: int, due: bool) -> None:
    """`runs` pending runs of workflow wf spread over `keys` keys named prefix0.., due now or
    in an hour."""
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, fairness_key, available_at) "
        "SELECT $1 || '-' || i, 'wf', 1, $1 || (i % $2), "
        "  CASE WHEN $4 THEN now() - i * interval '1 millisecond' "
        "       ELSE now() + interval '1 hour' END "
        "FROM generate_series(1, $3) AS i",
        prefix,
        keys,
        runs,
        due,
    )


async def test_fair_claim__a_dry_key_gives_its_turns_to_the_next_keys(app: App) -> None:
    """Keys a0 and a1 (first in key order at equal passes) have only runs due in an hour: the
    claim allocates them its turns, finds them dry, and takes the ten runs from the front's
    other keys in the same statement; the dry keys move behind the front, still active. The
    settling probe walks the per-key index (generic plan, as the worker's claimer)."""
    await _fill_keys(app, "k", 100, 30000, due=True)
    await _fill_keys(app, "a", 2, 10, due=False)
    await app.pool.execute("ANALYZE ripple_runs")
    args = ["w", 30.0, 10, ["wf"], ["wf"], [1], False, ["wf"]]
    async with app.pool.acquire() as conn:
        await conn.execute("SET plan_cache_mode = force_generic_plan")
        rows = await conn.fetch(
            "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + claim_sql._CLAIM_FAIR_PLAIN, *args
        )
        await conn.execute("RESET plan_cache_mode")
    plan = "\n".join(r[0] for r in rows)
    assert "Seq Scan on ripple_runs" not in plan, plan
    assert _buffers(plan) < 600, plan
    running = await app.pool.fetchval("SELECT count(*) FROM ripple_runs WHERE status = 'running'")
    assert running == 10
    keys = {r["key"]: r for r in await app.pool.fetch("SELECT * FROM ripple_fair_keys")}
    assert [(keys[k]["active"], keys[k]["pass"]) for k in ("a0", "a1")] == [
        (True, claim_sql.FAIR_QUANTUM)
    ] * 2
    assert sum(keys[f"k{i}"]["pass"] for i in range(100)) == 10


async def test_fairness__keys_waiting_for_time_do_not_hold_the_front(app: App) -> None:
    """The whole front (four keys at equal passes) waits for runs due in an hour, key z has
    runs due now: within two claims z is served, not never (pushing the dry keys to the
    front's largest pass would leave them in front while all passes are equal)."""
    await _fill_keys(app, "a", 4, 8, due=False)
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, fairness_key) "
        "SELECT 'z-' || i, 'wf', 1, 'z' FROM generate_series(1, 20) AS i"
    )
    claimed: list[store.ClaimedRun] = []
    async with app.pool.acquire() as conn:
        for _ in range(2):
            claimed += await store.claim_runs(
                conn, worker_id="w", lease=30.0, limit=10, pairs=[("wf", 1)], fair=["wf"]
            )
    assert claimed
    assert {c.run_id[:2] for c in claimed} == {"z-"}
    assert await _active_keys(app) == 5


async def test_fairness__run_until_idle_waits_for_a_due_run_behind_dry_keys(app: App) -> None:
    """The whole front of the first claim (keys a0..a3, first in key order at equal passes)
    has only runs due in an hour, key z a run due now: that claim comes back empty, and
    `run_until_idle` claims again (the dry keys moved behind the front) instead of returning
    with z's run due."""
    app.workflows.register(fair_import)
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, fairness_key, available_at) "
        "SELECT 'later-' || i, 'fair-import', 1, 'a' || (i % 4), now() + interval '1 hour' "
        "FROM generate_series(1, 8) AS i"
    )
    handle = await app.workflows.start(fair_import, {"tenantId": "z"})
    await app.worker(fair_import, concurrency=10).run_until_idle()
    status = await app.pool.fetchval(
        "SELECT status FROM ripple_runs WHERE run_id = $1", handle.run_id
    )
    assert status == "completed"


async def test_fair_claim__one_statement_per_batch_a_second_only_when_keys_come_up_short(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's claim of a full batch is one statement. Keys a0 and a1 (first at equal
    passes) have only runs due in an hour: the batch's keys come up short, and a second
    statement takes the ten runs from the front's other keys and moves the dry keys behind
    it; the next batch is one statement again."""
    await _fill_keys(app, "k", 100, 3000, due=True)
    await _fill_keys(app, "a", 2, 10, due=False)
    statements: list[str] = []
    fetch = asyncpg.Connection.fetch

    async def counted(self: asyncpg.Connection, query: str, *args: Any, **kw: Any) -> Any:
        statements.append(query)
        return await fetch(self, query, *args, **kw)

    monkeypatch.setattr(asyncpg.Connection, "fetch", counted)
    async with app.pool.acquire() as conn:
        for expected in (2, 1):
            statements.clear()
            claimed, _, _ = await store.claim_runs_plain(
                conn, worker_id="w", lease=30.0, limit=10, pairs=[("wf", 1)], fair=["wf"]
            )
            assert len(claimed) == 10
            assert {c.run_id[0] for c in claimed} == {"k"}
            assert len(statements) == expected
    monkeypatch.undo()
    keys = {r["key"]: r for r in await app.pool.fetch("SELECT * FROM ripple_fair_keys")}
    assert [(keys[k]["active"], keys[k]["pass"]) for k in ("a0", "a1")] == [
        (True, claim_sql.FAIR_QUANTUM)
    ] * 2
