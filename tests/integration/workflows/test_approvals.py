"""Approvals: a signed single-use link resumes the waiting run with the decision."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from ripple.platform.errors import Conflict, Gone, InvalidInput, NotFound
from ripple.workflows import WorkflowContext, workflow
from ripple.workflows.errors import WorkflowFailed
from ripple.workflows.runs.records import RunStatus
from tests.helpers import assert_eventually
from tests.integration.workflows.conftest import App

LINKS: list[str] = []


@workflow(name="refund")
async def refund(ctx: WorkflowContext, inp: dict[str, Any]) -> dict[str, Any]:
    link = ctx.step.approval_url("refund-ok")
    await ctx.step.run("send-link", lambda: LINKS.append(link))
    decision = await ctx.step.wait_for_approval(
        "refund-ok",
        approvers=inp.get("approvers"),
        timeout=inp.get("timeout", 60),
        details={"amount": inp.get("amount", 10)},
        on_timeout=inp.get("on_timeout", "reject"),
    )
    return {
        "approved": decision.approved,
        "by": decision.by,
        "comment": decision.comment,
        "at": decision.at.isoformat(),
    }


async def waiting(app: App, run_id: str) -> bool:
    run = await app.workflows.get_run(run_id)
    return run is not None and run.status == RunStatus.WAITING


async def pending_link(app: App, run_id: str) -> str:
    await assert_eventually(lambda: waiting(app, run_id))
    pending = await app.workflows.approvals.list()
    [item] = [p for p in pending if p.run_id == run_id]
    assert item.step == "refund-ok"
    assert item.details == {"amount": 10}
    assert item.url.startswith("/approve/")
    assert item.expires_at is not None
    return item.url


async def test_approval__approve_resumes_the_run_with_the_decision(app: App) -> None:
    handle = await app.workflows.start(refund, {})
    async with app.worker(refund):
        url = await pending_link(app, handle.run_id)
        assert url in LINKS  # the link the workflow sent is the pending one
        decision = await app.workflows.approvals.decide(url, approved=True, by="ann", comment="ok")
        assert (decision.approved, decision.by, decision.comment) == (True, "ann", "ok")
        out = await handle.result(timeout=10)
    assert (out["approved"], out["by"], out["comment"]) == (True, "ann", "ok")
    assert await app.workflows.approvals.list() == []
    [audit] = await app.pool.fetch("SELECT action, target, details FROM ripple_audit")
    assert (audit["action"], audit["target"]) == ("approval.decide", handle.run_id)
    assert audit["details"]["approved"] is True


async def test_approval__reject_by_token(app: App) -> None:
    handle = await app.workflows.start(refund, {})
    async with app.worker(refund):
        url = await pending_link(app, handle.run_id)
        await app.workflows.approvals.decide(url.rsplit("/", 1)[-1], approved=False)
        out = await handle.result(timeout=10)
    assert (out["approved"], out["by"]) == (False, None)
    item = await app.workflows.approvals.get(url)
    assert item.state == "rejected"


async def test_approval__a_second_use_conflicts_and_changes_nothing(app: App) -> None:
    handle = await app.workflows.start(refund, {})
    async with app.worker(refund):
        url = await pending_link(app, handle.run_id)
        await app.workflows.approvals.decide(url, approved=True, by="ann")
        with pytest.raises(Conflict, match="already approved"):
            await app.workflows.approvals.decide(url, approved=False, by="bob")
        out = await handle.result(timeout=10)
    assert (out["approved"], out["by"]) == (True, "ann")
    assert await app.pool.fetchval("SELECT count(*) FROM ripple_audit") == 1


async def test_approval__timeout_rejects_with_no_decider(app: App) -> None:
    handle = await app.workflows.start(refund, {"timeout": 0.2})
    async with app.worker(refund):
        out = await handle.result(timeout=10)
    assert (out["approved"], out["by"], out["comment"]) == (False, None, None)
    [item] = await app.workflows.approvals.list(pending=False)
    assert item.state == "expired"
    with pytest.raises(Gone, match="expired"):
        await app.workflows.approvals.decide(item.url, approved=True)


async def test_approval__timeout_raises_when_asked(app: App) -> None:
    handle = await app.workflows.start(refund, {"timeout": 0.2, "on_timeout": "raise"})
    async with app.worker(refund):
        with pytest.raises(WorkflowFailed) as failed:
            await handle.result(timeout=10)
    assert failed.value.error["type"] == "StepTimeoutError"


async def test_approval__expired_link_is_gone(app: App) -> None:
    handle = await app.workflows.start(refund, {"timeout": timedelta(hours=1).total_seconds()})
    async with app.worker(refund):
        url = await pending_link(app, handle.run_id)
        # Move time: the approval's expiry passed (its wait's timer is not due yet for the run).
        await app.pool.execute("UPDATE ripple_approvals SET expires_at = now() - interval '1s'")
        with pytest.raises(Gone):
            await app.workflows.approvals.decide(url, approved=True)
        assert await waiting(app, handle.run_id)
        await app.workflows.cancel(handle.run_id)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda t: t[:-2] + ("AA" if not t.endswith("AA") else "BB"),
        lambda t: "x" + t,
        lambda t: t.split(".")[0],
        lambda t: "bm9ydW4vcmVmdW5kLW9r." + t.split(".")[1],  # another run, same MAC
        lambda t: "garbage",
    ],
)
async def test_approval__forged_or_altered_token_is_not_found(app: App, tamper: Any) -> None:
    handle = await app.workflows.start(refund, {})
    async with app.worker(refund):
        url = await pending_link(app, handle.run_id)
        token = url.rsplit("/", 1)[-1]
        with pytest.raises(NotFound):
            await app.workflows.approvals.decide(tamper(token), approved=True)
        assert await waiting(app, handle.run_id)
        await app.workflows.cancel(handle.run_id)


async def test_approval__only_listed_approvers_decide(app: App) -> None:
    handle = await app.workflows.start(refund, {"approvers": ["ann"]})
    async with app.worker(refund):
        url = await pending_link(app, handle.run_id)
        with pytest.raises(InvalidInput, match="ann"):
            await app.workflows.approvals.decide(url, approved=True, by="mallory")
        await app.workflows.approvals.decide(url, approved=True, by="ann")
        out = await handle.result(timeout=10)
    assert out["by"] == "ann"


async def test_approval__a_canceled_run_closes_its_approval(app: App) -> None:
    handle = await app.workflows.start(refund, {})
    async with app.worker(refund):
        url = await pending_link(app, handle.run_id)
        await app.workflows.cancel(handle.run_id)
        with pytest.raises(Gone, match="ended"):
            await app.workflows.approvals.decide(url, approved=True)
    assert await app.workflows.approvals.list() == []
    [item] = await app.workflows.approvals.list(pending=False)
    assert item.state == "closed"


async def test_approval__get_reads_the_linked_approval_among_many_of_its_run(app: App) -> None:
    """A link opens its approval however many approvals its run has (a loop may ask one per
    iteration), not only those among the run's first few hundred."""
    handle = await app.workflows.start(refund, {})
    async with app.worker(refund):
        url = await pending_link(app, handle.run_id)
        await app.pool.execute(
            "INSERT INTO ripple_approvals (run_id, step, workflow, created_at) "
            "SELECT $1, 'earlier-' || i, 'refund', now() - interval '1 hour' "
            "FROM generate_series(1, 600) AS i",
            handle.run_id,
        )
        item = await app.workflows.approvals.get(url)
        assert (item.run_id, item.step, item.state) == (handle.run_id, "refund-ok", "pending")
        assert item.url == url
