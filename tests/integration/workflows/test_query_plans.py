"""Hot workflow queries use their indexes (guards against plan regressions).

Claims run against tables in every state: fresh ones without statistics (the planner guesses),
analyzed ones, with a long history of finished runs, and with a backlog of due runs, some of
workflows the worker does not serve. In each, a claim must walk the per-workflow claim index
and touch a bounded number of buffers, whatever the backlog and history.
"""

from __future__ import annotations

import re

import pytest

from ripple.platform.core.db import Connection, DedicatedConnection
from ripple.workflows import store
from ripple.workflows.store import claim as claim_sql
from tests.integration.workflows.conftest import App

CLAIM_ARGS = ["w", 30.0, 10, ["wf"], ["wf"], [1], False]
NEXT_DUE_ARGS = [["wf"], ["wf"], [1]]


async def _fill(app: App) -> None:
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, status, completed_at) "
        "SELECT 'done-' || i, 'wf', 1, 'completed', now() FROM generate_series(1, 20000) AS i"
    )
    for workflow in ("wf", "other"):
        await app.pool.execute(
            "INSERT INTO ripple_runs (run_id, workflow, version, available_at) "
            "SELECT $1 || '-due-' || i, $1, 1, now() - i * interval '1 millisecond' "
            "FROM generate_series(1, 3000) AS i",
            workflow,
        )


async def _claim(
    conn: Connection, *, limit: int, pairs: list[tuple[str, int]], plain: bool
) -> list[store.ClaimedRun]:
    if not plain:
        return await store.claim_runs(conn, worker_id="w", lease=30.0, limit=limit, pairs=pairs)
    claims, governed, _ = await store.claim_runs_plain(
        conn, worker_id="w", lease=30.0, limit=limit, pairs=pairs
    )
    assert not governed
    return claims


def _buffers(plan: str) -> int:
    """Shared buffers the whole statement touched (the top node's count)."""
    found = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
    assert found is not None, plan
    return int(found.group(1)) + int(found.group(2) or 0)


@pytest.mark.parametrize("analyzed", [False, True], ids=["no-statistics", "analyzed"])
async def test_claim_and_next_due__walk_the_claim_index_with_bounded_work(
    app: App, analyzed: bool
) -> None:
    await _fill(app)
    if analyzed:
        await app.pool.execute("ANALYZE ripple_runs")
    for sql, args in [
        (claim_sql._NEXT_DUE, NEXT_DUE_ARGS),
        (claim_sql._CLAIM_RUNS, CLAIM_ARGS),
        (claim_sql._CLAIM_PLAIN, CLAIM_ARGS),
    ]:
        # (EXPLAIN ANALYZE executes the claim: ten runs become running, which is harmless.)
        rows = await app.pool.fetch("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, *args)
        plan = "\n".join(r[0] for r in rows)
        assert "ripple_runs_claim" in plan, plan
        assert "ripple_runs_workflow_list" not in plan, plan
        assert "Seq Scan on ripple_runs" not in plan, plan
        # 3,000 due runs of this workflow, 3,000 of another, 20,000 finished: a claim of ten
        # touches a few dozen buffers, not thousands.
        assert _buffers(plan) < 200, plan


async def test_claims__generic_plans_made_on_empty_tables_stay_bounded_as_runs_pile_up(
    app: App,
) -> None:
    """The worker's claimer keeps generic plans (`plan_cache_mode`): a plan made when the
    tables were empty serves the backlog that follows, and is made again after ANALYZE. Both
    must walk the claim index and find the claimed rows by ctid, not by a join whose strategy
    depends on the estimated row count."""
    claimer = DedicatedConnection(
        app.settings, application_name="t", plan_cache_mode="force_generic_plan"
    )
    conn = await claimer.get()
    try:
        claims = "text, float8, int, text[], text[], int[], bool"
        statements = {
            "claim_plain": (claim_sql._CLAIM_PLAIN, claims),
            "claim_flow": (claim_sql._CLAIM_RUNS, claims),
            "next_due": (claim_sql._NEXT_DUE, "text[], text[], int[]"),
        }
        for name, (sql, types) in statements.items():
            await conn.execute(f"PREPARE {name}({types}) AS {sql}")
        calls = {
            "claim_plain": "claim_plain('w', 30, 10, '{wf}', '{wf}', '{1}', false)",
            "claim_flow": "claim_flow('w', 30, 10, '{wf}', '{wf}', '{1}', false)",
            "next_due": "next_due('{wf}', '{wf}', '{1}')",
        }
        for call in calls.values():
            await conn.execute(f"EXECUTE {call}")  # the plans are made now, on empty tables
        await _fill(app)
        for state in ("no-statistics", "analyzed"):
            if state == "analyzed":
                await app.pool.execute("ANALYZE ripple_runs")
            for call in calls.values():
                rows = await conn.fetch(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) EXECUTE {call}")
                plan = "\n".join(r[0] for r in rows)
                assert "ripple_runs_claim" in plan, (state, plan)
                assert "Seq Scan on ripple_runs" not in plan, (state, plan)
                assert _buffers(plan) < 200, (state, plan)
        generic = await conn.fetchval(
            "SELECT sum(generic_plans) FROM pg_prepared_statements WHERE custom_plans = 0"
        )
        assert generic >= 9  # every execution above used a generic plan
    finally:
        await claimer.close()


@pytest.mark.parametrize("plain", [False, True], ids=["flow-control", "plain"])
async def test_claim__takes_the_oldest_due_runs_of_served_pairs_only(app: App, plain: bool) -> None:
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, available_at) VALUES "
        "('old-a', 'a', 1, now() - interval '3 s'), ('old-b', 'b', NULL, now() - interval '2 s'),"
        "('v2-a', 'a', 2, now() - interval '5 s'), ('new-a', 'a', 1, now() - interval '1 s'),"
        "('later-b', 'b', 3, now() + interval '1 hour'), ('c', 'c', 1, now() - interval '9 s')"
    )
    pairs = [("a", 1), ("b", 3), ("b", 2)]
    async with app.pool.acquire() as conn:
        claims = await _claim(conn, limit=2, pairs=pairs, plain=plain)
        assert [c.run_id for c in claims] == ["old-a", "old-b"]
        assert {c.run_id: c.version for c in claims} == {"old-a": 1, "old-b": 3}
        rest = await _claim(conn, limit=10, pairs=pairs, plain=plain)
        assert [c.run_id for c in rest] == ["new-a"]
        due = await store.next_due(conn, pairs=pairs)
    # 'later-b' is next (an hour away); the claimed runs' leases expire in 30 s.
    assert due is not None
    assert 25 < due <= 30


async def test_claim__parked_runs_are_not_rescanned(app: App) -> None:
    """5,000 runs parked behind a full concurrency key cost a claim nothing."""
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, available_at, concurrency_key, "
        "concurrency_limit, blocked_by) "
        "SELECT 'parked-' || i, 'wf', 1, 'infinity', 'k', 1, 'concurrency' "
        "FROM generate_series(1, 5000) AS i"
    )
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, available_at, concurrency_key, "
        "concurrency_limit) SELECT 'due-' || i, 'wf', 1, now(), 'k' || i, 1 "
        "FROM generate_series(1, 10) AS i"
    )
    rows = await app.pool.fetch(
        "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + claim_sql._CLAIM_RUNS, *CLAIM_ARGS
    )
    plan = "\n".join(r[0] for r in rows)
    assert "Seq Scan on ripple_runs" not in plan, plan
    assert _buffers(plan) < 300, plan
    running = await app.pool.fetchval("SELECT count(*) FROM ripple_runs WHERE status = 'running'")
    assert running == 10


async def test_plain_claim__leaves_flow_control_its_runs_and_claims_them_with_it(app: App) -> None:
    """A worker whose workflows declare no flow control claims without it first; runs that
    still need it (keyed when another version declared it) are claimed under it all the same:
    one of three per concurrency key, the others parked; a keyed run that already holds its
    slot (a recovery) passes, as flow control would let it, claimed alone as a suspect."""
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, available_at, status, "
        "concurrency_key, concurrency_limit, lease_owner, started_at) VALUES "
        "('free-1', 'wf', 1, now() - interval '5 s', 'pending', NULL, NULL, NULL, NULL),"
        "('k-1', 'wf', 1, now() - interval '4 s', 'pending', 'k', 1, NULL, NULL),"
        "('k-2', 'wf', 1, now() - interval '3 s', 'pending', 'k', 1, NULL, NULL),"
        "('k-3', 'wf', 1, now() - interval '2 s', 'pending', 'k', 1, NULL, NULL),"
        "('held', 'wf', 1, now() - interval '1 s', 'running', 'j', 1, 'dead', now()),"
        "('free-2', 'wf', 1, now(), 'pending', NULL, NULL, NULL, NULL)"
    )
    await app.pool.execute(
        "INSERT INTO ripple_concurrency_slots (workflow, key, active, lim, granted) "
        "VALUES ('wf', 'j', 1, 1, 1)"
    )
    async with app.pool.acquire() as conn:
        claims, governed, waiting = await store.claim_runs_plain(
            conn, worker_id="w", lease=30.0, limit=10, pairs=[("wf", 1)], alone=False
        )
        (held,) = await store.claim_runs(
            conn, worker_id="w2", lease=30.0, limit=10, pairs=[("wf", 1)], alone=True
        )
    assert (governed, waiting) == (True, True)
    assert sorted(c.run_id for c in claims) == ["free-1", "free-2", "k-1"]
    assert {c.run_id for c in claims if c.keyed} == {"k-1"}
    assert (held.run_id, held.keyed, held.suspect) == ("held", True, True)
    parked = await app.pool.fetch(
        "SELECT run_id, blocked_by FROM ripple_runs WHERE status = 'pending' ORDER BY run_id"
    )
    assert [(r["run_id"], r["blocked_by"]) for r in parked] == [
        ("k-2", "concurrency"),
        ("k-3", "concurrency"),
    ]
    slots = await app.pool.fetch(
        "SELECT key, active FROM ripple_concurrency_slots WHERE workflow = 'wf' ORDER BY key"
    )
    assert [(r["key"], r["active"]) for r in slots] == [("j", 1), ("k", 1)]


async def test_plain_claim__with_nothing_due_claims_nothing(app: App) -> None:
    async with app.pool.acquire() as conn:
        claims, governed, _ = await store.claim_runs_plain(
            conn, worker_id="w", lease=30.0, limit=10, pairs=[("wf", 1)]
        )
    assert (claims, governed) == ([], False)
