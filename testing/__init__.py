"""Testing workflows in pytest: `Environment` (a throwaway database, a connected client and an
in-process worker; `fire_timers` skips sleeps and wait timeouts) and `replay` (exported
journals against your code, without a database).

    from ripple.testing import Environment, replay

    async def test_onboarding() -> None:
        async with Environment([onboarding]) as env:
            handle = await env.client.start(onboarding, {"userId": 1})
            await env.fire_timers(handle.run_id)
            ...

    def test_deployed_runs_still_replay() -> None:
        replay(onboarding, "tests/runs.json")   # from `ripple runs export`
"""

from __future__ import annotations

from ripple.testing.environment import Environment
from ripple.testing.replay import ReplayDiverged, replay, replay_async

__all__ = ["Environment", "ReplayDiverged", "replay", "replay_async"]
