"""Example app: onboard a user who signed up, then wait for them to verify their email.

Run it with `make run` (or `ripple dev --app examples.onboarding`), then:

    ripple publish user.signup '{"userId": 42, "email": "ann@example.com"}'
    ripple runs list                       # the run sleeps a few seconds, then waits
    ripple publish user.verified '{"userId": 42}'
    ripple runs show <run id>              # completed, with the step timeline

`setup(client)` subscribes the workflow to `user.signup` when the worker starts (idempotently).
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, Field

from ripple.platform.client import Client
from ripple.subscribers import WorkflowTarget
from ripple.workflows import WorkflowContext, workflow

__all__ = ["Signup", "onboard_user", "setup"]

#: How long the welcome delay sleeps (a real app would use hours; the demo uses seconds).
WELCOME_DELAY = timedelta(seconds=3)
#: How long the run waits for `user.verified` before nudging instead.
VERIFY_TIMEOUT = timedelta(hours=1)


class Signup(BaseModel):
    """The `user.signup` event payload."""

    userId: int = Field(ge=1)  # the JSON field name of the event
    email: str = "user@example.com"


def create_account(user_id: int, email: str) -> dict[str, Any]:
    """Pretend to create the account (a real app writes to its database here)."""
    account = "acct_" + hashlib.sha256(f"{user_id}:{email}".encode()).hexdigest()[:10]
    return {"account": account, "userId": user_id}


async def send_email(to: str, template: str) -> str:
    """Pretend to send an email; returns a message id."""
    return f"msg_{template}_{hashlib.sha256(to.encode()).hexdigest()[:8]}"


@workflow(name="onboard-user", version=1)
async def onboard_user(ctx: WorkflowContext, inp: Signup) -> dict[str, Any]:
    """Create the account, welcome the user, then wait for them to verify their email."""
    account = await ctx.step.run("create-account", create_account, inp.userId, inp.email)
    await ctx.step.run("send-welcome", send_email, inp.email, "welcome")
    await ctx.step.sleep("welcome-delay", WELCOME_DELAY)
    verified = await ctx.step.wait_for_event(
        "verified", event="user.verified", match={"userId": inp.userId}, timeout=VERIFY_TIMEOUT
    )
    if verified is None:
        await ctx.step.run("nudge", send_email, inp.email, "please-verify")
        return {**account, "verified": False}
    await ctx.step.run("send-tips", send_email, inp.email, "getting-started")
    return {**account, "verified": True}


async def setup(client: Client) -> None:
    """Subscribe `onboard-user` to `user.signup` unless that subscription already exists."""
    for sub in await client.list_subscriptions():
        target = sub.target
        if sub.pattern == "user.signup" and target.get("workflow") == onboard_user.name:
            return
    await client.subscribe("user.signup", WorkflowTarget(onboard_user))
