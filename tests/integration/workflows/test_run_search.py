"""Search attributes: journaled once, indexed, and found by the where language."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ripple.platform.errors import InvalidInput
from ripple.workflows import WorkflowContext, workflow
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runs.search_query import parse_where
from ripple.workflows.store import runs, search
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App

CALLS: list[str] = []


@workflow(name="order")
async def order(ctx: WorkflowContext, inp: dict[str, Any]) -> str:
    attrs = dict(inp)
    if "when" in attrs:
        attrs["when"] = datetime.fromisoformat(attrs["when"])
    ctx.set_attributes(**attrs)
    await ctx.step.run("charge", lambda: CALLS.append(ctx.run_id))
    return "ok"


@workflow(name="declared", attributes={"customer": str, "amount": float})
async def declared(ctx: WorkflowContext, inp: dict[str, Any]) -> str:
    await ctx.set_attributes(**inp)
    return "ok"


@workflow(name="waits-then-sets")
async def waits_then_sets(ctx: WorkflowContext) -> Any:
    ctx.set_attributes(stage="waiting")
    got = await ctx.step.wait_for_event("go", timeout=30)
    ctx.set_attributes(stage="done")
    return got


RUNS = {
    "a": {"customer": "acme", "amount": 120.5, "vip": True, "when": "2026-01-05T10:00:00+00:00"},
    "b": {"customer": "acme", "amount": 80, "vip": False, "when": "2026-02-05T10:00:00+00:00"},
    "c": {"customer": "globex", "amount": 300, "vip": True, "when": "2026-03-05T10:00:00+00:00"},
    "d": {"customer": "o'brien", "amount": -5},
}


async def seeded(app: App) -> dict[str, str]:
    ids: dict[str, str] = {}
    for label, inp in RUNS.items():
        ids[label] = (await app.workflows.start(order, inp)).run_id
    async with app.worker(order):
        for run_id in ids.values():
            await app.workflows.handle(run_id).result(timeout=10)
    return ids


async def found(app: App, where: str, **kw: Any) -> set[str]:
    page = await app.workflows.list_runs(where=where, limit=100, **kw)
    return {run.run_id for run in page.items}


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ('customer = "acme"', {"a", "b"}),
        ("customer == 'acme'", {"a", "b"}),
        ('customer != "acme"', {"c", "d"}),
        ("amount > 100", {"a", "c"}),
        ("amount >= 120.5", {"a", "c"}),
        ("amount < 80", {"d"}),
        ("amount <= 80", {"b", "d"}),
        ("amount = -5", {"d"}),
        ("vip = true", {"a", "c"}),
        ("vip != true", {"b"}),
        ('when >= timestamp("2026-02-01")', {"b", "c"}),
        ('when < timestamp("2026-02-01T00:00:00Z")', {"a"}),
        ('customer = "acme" and amount > 100', {"a"}),
        ('customer = "globex" or amount < 0', {"c", "d"}),
        ('not customer = "acme"', {"c", "d"}),
        ('customer in ["acme", "globex"] and not (vip = false)', {"a", "c"}),
        ('customer not in ["acme"]', {"c", "d"}),
        ("amount in [80, 300]", {"b", "c"}),
        ('customer = "o\\\'brien"', {"d"}),
        ('workflow = "order" and amount > 200', {"c"}),
        ('status = "completed" and customer = "globex"', {"c"}),
        ('status in ["failed", "canceled"]', set()),
        ('created_at > "2000-01-01" and vip = true', {"a", "c"}),
        ('created_at < "2000-01-01"', set()),
        ("nosuch = 1", set()),
    ],
)
async def test_where__each_operator_and_type(app: App, where: str, expected: set[str]) -> None:
    ids = await seeded(app)
    labels = {v: k for k, v in ids.items()}
    assert {labels[r] for r in await found(app, where)} == expected


async def test_where__combines_with_the_plain_filters_and_pages(app: App) -> None:
    ids = await seeded(app)
    assert await found(app, "amount > 0", status=RunStatus.COMPLETED) == {
        ids["a"],
        ids["b"],
        ids["c"],
    }
    first = await app.workflows.list_runs(where="amount > 0", limit=2)
    second = await app.workflows.list_runs(where="amount > 0", limit=2, cursor=first.next_cursor)
    assert len(first.items) == 2
    assert first.next_cursor is not None
    assert {r.run_id for r in first.items + second.items} == {ids["a"], ids["b"], ids["c"]}
    assert await found(app, "amount > 0", workflow="declared") == set()


@pytest.mark.parametrize(
    ("where", "position"),
    [
        ('customer = "acme" and', 22),
        ("amount >> 3", 9),
        ('customer = "acme', 12),
        ("(amount > 3", 12),
        ("amount 3", 8),
        ("= 3", 1),
        ('customer in "acme"', 13),
        ("amount > 3 garbage", 12),
    ],
)
async def test_where__a_bad_query_names_the_position(app: App, where: str, position: int) -> None:
    with pytest.raises(InvalidInput, match=f"position {position}:"):
        await app.workflows.list_runs(where=where)


@pytest.mark.parametrize(
    "where",
    [
        'customer = "\'; drop table ripple_runs; --"',
        "customer = '\"; drop table ripple_runs; --'",
        "customer in ['x\\') or true --', \"a\"]",
    ],
)
async def test_where__injection_in_values_is_only_a_value(app: App, where: str) -> None:
    ids = await seeded(app)
    assert await found(app, where) == set()
    assert await found(app, 'customer = "acme"') == {ids["a"], ids["b"]}
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_runs") == len(ids)


@pytest.mark.parametrize(
    "where",
    [
        "drop = 1; drop table ripple_runs",
        "x = 1) or (1 = 1",
        'ripple_runs.status = "completed"',
        "r.run_id = 1",
    ],
)
async def test_where__injection_in_names_is_refused(app: App, where: str) -> None:
    await seeded(app)
    with pytest.raises(InvalidInput, match="position"):
        await app.workflows.list_runs(where=where)
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_runs") == len(RUNS)


async def test_set_attributes__odd_names_are_values_not_sql(app: App) -> None:
    ids = await seeded(app)
    # An attribute name that is a SQL keyword is just a name to look up.
    assert await found(app, "select = 1 or customer = 'globex'") == {ids["c"]}


async def test_set_attributes__replay_writes_once(app: App) -> None:
    handle = await app.workflows.start(waits_then_sets)
    async with app.worker(waits_then_sets):

        async def waiting() -> bool:
            run = await app.workflows.get_run(handle.run_id)
            return run is not None and run.status == RunStatus.WAITING

        await assert_eventually(waiting)
        assert await found(app, 'stage = "waiting"') == {handle.run_id}
        await app.workflows.signal(handle.run_id, "go", {"ok": 1})
        assert await handle.result(timeout=10) == {"ok": 1}
    steps = await app.workflows.list_steps(handle.run_id)
    assert [s.key for s in steps if s.kind == "attributes"] == ["$attributes", "$attributes:1"]
    rows = await app.pool.fetch(
        "SELECT name, value_text FROM ripple_run_attributes WHERE run_id = $1", handle.run_id
    )
    assert [(r["name"], r["value_text"]) for r in rows] == [("stage", "done")]
    assert await found(app, 'stage = "waiting"') == set()


async def test_set_attributes__declared_names_and_types_are_enforced(app: App) -> None:
    good = await app.workflows.start(declared, {"customer": "acme", "amount": 3})
    typo = await app.workflows.start(declared, {"custmer": "acme"})
    wrong = await app.workflows.start(declared, {"amount": "lots"})
    async with app.worker(declared):
        assert await app.workflows.handle(good.run_id).result(timeout=10) == "ok"
        for bad in (typo, wrong):

            async def failed(run_id: str = bad.run_id) -> bool:
                run = await app.workflows.get_run(run_id)
                return run is not None and run.status == RunStatus.FAILED

            await assert_eventually(failed)
    typo_run = await app.workflows.get_run(typo.run_id)
    wrong_run = await app.workflows.get_run(wrong.run_id)
    assert typo_run is not None
    assert typo_run.error is not None
    assert "not declared" in typo_run.error["message"]
    assert wrong_run is not None
    assert wrong_run.error is not None
    assert "declared float" in wrong_run.error["message"]
    assert await found(app, "amount = 3") == {good.run_id}


async def test_set_attributes__a_run_that_sets_none_writes_no_attribute_row(app: App) -> None:
    handle = await app.workflows.start(waits_then_sets)
    await app.workflows.cancel(handle.run_id)
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_run_attributes") == 0
    assert datetime.now(UTC).year >= 2024


async def test_where__plans_use_the_attribute_indexes(app: App) -> None:
    await app.pool.execute(
        "INSERT INTO ripple_runs (run_id, workflow, version, status) "
        "SELECT lpad(i::text, 8, '0'), 'wf', 1, 'completed' FROM generate_series(1, 20000) AS i"
    )
    await app.pool.execute(
        "INSERT INTO ripple_run_attributes (run_id, name, type, value_text) "
        "SELECT lpad(i::text, 8, '0'), 'customer', 'str', 'c' || (i % 2000) "
        "FROM generate_series(1, 20000) AS i"
    )
    await app.pool.execute(
        "INSERT INTO ripple_run_attributes (run_id, name, type, value_num) "
        "SELECT lpad(i::text, 8, '0'), 'amount', 'float', i FROM generate_series(1, 20000) AS i"
    )
    await app.pool.execute("ANALYZE ripple_runs")
    await app.pool.execute("ANALYZE ripple_run_attributes")
    for where, index in [
        ('customer = "c7"', "ripple_run_attributes_text"),
        ("amount > 19990", "ripple_run_attributes_num"),
        ('customer in ["c7", "c8"] and amount < 5000', "ripple_run_attributes_"),
    ]:
        condition, params = search.compile_where(parse_where(where))
        sql = runs.LIST_RUNS.format(where="\n  AND " + condition)
        args = [None, None, None, None, None, None, 51, *params]
        rows = await app.pool.fetch("EXPLAIN (ANALYZE, COSTS OFF) " + sql, *args)
        plan = "\n".join(r[0] for r in rows)
        assert "Seq Scan on ripple_run_attributes" not in plan, plan
        assert index in plan, plan
        assert "Seq Scan on ripple_runs" not in plan, plan


async def test_retention__deletes_a_runs_attributes_with_the_run(app: App) -> None:
    ids = await seeded(app)
    await app.pool.execute(
        "UPDATE ripple_runs SET completed_at = now() - interval '2 days' WHERE run_id = $1",
        ids["a"],
    )
    async with app.pool.acquire() as conn:
        counts, _ = await app.workflows.upkeep.delete_expired_runs(
            conn, max_retention=86_400, default_retention=86_400, batch=10, journal_budget=100
        )
    assert counts["runs"] == 1
    left = await app.pool.fetch("SELECT DISTINCT run_id FROM ripple_run_attributes")
    assert {r["run_id"] for r in left} == {ids["b"], ids["c"], ids["d"]}
