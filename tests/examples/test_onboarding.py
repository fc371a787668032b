"""The example app (`examples/onboarding.py`, what `make run` serves) under `ripple.testing`:
a run that sleeps 3 s and waits an hour completes in milliseconds."""

from __future__ import annotations

import pytest

from examples import onboarding
from ripple.testing import Environment

pytestmark = pytest.mark.timeout(120)


async def test_onboarding__signup_then_verification_completes_the_run(pg_admin_url: str) -> None:
    async with Environment([onboarding.onboard_user], database_url=pg_admin_url) as env:
        await onboarding.setup(env.client)
        result = await env.client.publish("user.signup", {"userId": 42, "email": "a@b.c"})
        assert result.deliveries == 1
        [run] = (await env.client.list_runs(onboarding.onboard_user.name)).items
        run_id = run.run_id
        assert await env.fire_timers(run_id) == 1  # the 3-second welcome delay
        await env.settle(run_id)  # now waiting for the verification
        await env.client.publish("user.verified", {"userId": 42})
        output = await env.client.handle(run_id).result(timeout=10)
        assert output["verified"] is True
        steps = {s.key: s for s in await env.client.list_steps(run_id)}
        assert steps["welcome-delay"].output["firedEarly"] is True
        assert "send-tips" in steps


async def test_onboarding__without_verification_the_timeout_fires_and_nudges(
    pg_admin_url: str,
) -> None:
    async with Environment([onboarding.onboard_user], database_url=pg_admin_url) as env:
        handle = await env.client.start(onboarding.onboard_user, {"userId": 7})
        assert await env.fire_timers(handle.run_id) == 1  # the sleep
        assert await env.fire_timers() == 1  # the hour-long verification timeout
        output = await handle.result(timeout=10)
        assert output["verified"] is False
