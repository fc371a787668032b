"""Exported runs of the example app (`journals/onboarding_runs.json`, written by `ripple runs
export`: two completed, one waiting for verification, one in its welcome delay) replayed with
`ripple.testing.replay`, without a database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from examples import onboarding
from ripple.testing import ReplayDiverged, replay
from ripple.workflows import WorkflowContext, workflow

RUNS = Path(__file__).parent / "journals" / "onboarding_runs.json"


@workflow(name="onboard-user", version=1)
async def welcome_first(ctx: WorkflowContext, inp: onboarding.Signup) -> dict[str, Any]:
    """The onboarding workflow with its first two steps swapped."""
    await ctx.step.run("send-welcome", onboarding.send_email, inp.email, "welcome")
    account = await ctx.step.run("create-account", onboarding.create_account, inp.userId, inp.email)
    await ctx.step.sleep("welcome-delay", onboarding.WELCOME_DELAY)
    await ctx.step.wait_for_event("verified", event="user.verified", match={"userId": inp.userId})
    return dict(account)


@workflow(name="onboard-user", version=1)
async def no_tips(ctx: WorkflowContext, inp: onboarding.Signup) -> dict[str, Any]:
    """The onboarding workflow that no longer sends tips after verification."""
    account = await ctx.step.run("create-account", onboarding.create_account, inp.userId, inp.email)
    await ctx.step.run("send-welcome", onboarding.send_email, inp.email, "welcome")
    await ctx.step.sleep("welcome-delay", onboarding.WELCOME_DELAY)
    verified = await ctx.step.wait_for_event(
        "verified", event="user.verified", match={"userId": inp.userId}, timeout=3600
    )
    if verified is None:
        await ctx.step.run("nudge", onboarding.send_email, inp.email, "please-verify")
    return dict(account)


def test_replay__the_example_app_replays_its_exported_runs() -> None:
    report = replay(onboarding, RUNS)
    assert report.runs_checked == 4
    assert report.divergences == []


def test_replay__reordered_steps_raise_with_every_run_named() -> None:
    with pytest.raises(ReplayDiverged) as raised:
        replay(welcome_first, RUNS)
    report = raised.value.report
    assert report.runs_checked == 4
    assert {(d.position, d.expected, d.actual) for d in report.divergences} == {
        (0, "run 'create-account'", "run 'send-welcome'")
    }
    assert {d.status for d in report.divergences} == {"completed", "waiting", "sleeping"}
    assert "position 0" in str(raised.value)


def test_replay__a_dropped_step_only_breaks_the_completed_run_that_made_it() -> None:
    with pytest.raises(ReplayDiverged) as raised:
        replay(no_tips, RUNS)
    [divergence] = raised.value.report.divergences
    assert divergence.status == "completed"
    assert divergence.expected == "run 'send-tips'"
    assert divergence.actual == "the workflow returning"
    # Only completed runs diverge: not strict, it passes.
    assert replay(no_tips, RUNS, strict=False).ok
