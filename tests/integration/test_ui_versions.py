"""The dashboard's versions page (active runs per version, live workers, stranded versions)
and the run page's "Skip sleep" action."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from ripple.platform.api.app import create_app
from ripple.testing import Environment
from ripple.workflows import WorkflowContext, workflow
from ripple.workflows.runs.records import RunStatus
from tests.helpers import assert_eventually, csrf_of

pytestmark = pytest.mark.timeout(120)


@workflow(name="ui-nap", version=2)
async def nap(ctx: WorkflowContext) -> str:
    await ctx.step.sleep("long", timedelta(days=2))
    return "rested"


async def test_ui__versions_page_and_skip_sleep(pg_admin_url: str) -> None:
    async with Environment([nap], database_url=pg_admin_url) as env:
        handle = await env.client.start(nap, None)
        await env.client.start("ui-unserved", {"x": 1})  # no worker serves it: stranded

        async def sleeping() -> bool:
            run = await env.client.get_run(handle.run_id)
            return run is not None and run.status == RunStatus.SLEEPING

        await assert_eventually(sleeping)
        [served, unserved] = await env.client.deploys.versions(live_seconds=30)
        assert (unserved.workflow, unserved.stranded) == ("ui-unserved", True)
        assert (served.workflow, served.stranded) == ("ui-nap", False)
        [v2] = served.versions
        assert (v2.version, v2.runs, v2.by_status, v2.workers) == (2, 1, {"sleeping": 1}, 1)

        transport = httpx.ASGITransport(app=create_app(env.client))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as ui:
            page = await ui.get("/ui/versions")
            assert page.status_code == 200
            assert 'id="stranded"' in page.text
            assert "ui-unserved" in page.text
            run_page = await ui.get(f"/ui/runs/{handle.run_id}")
            assert "Skip sleep" in run_page.text
            refused = await ui.post(f"/ui/runs/{handle.run_id}/wake", data={})
            assert refused.status_code == 403
            done = await ui.post(
                f"/ui/runs/{handle.run_id}/wake", data={"csrf": csrf_of(run_page.text)}
            )
            assert done.status_code == 303
            assert "Timers+fired" in done.headers["location"]
        assert await handle.result(timeout=10) == "rested"
