"""REST start with a fairness key."""

from __future__ import annotations

from typing import Any

import httpx

from ripple.platform.client import Client
from ripple.workflows import Fairness, WorkflowContext, workflow


@workflow(name="rest-fair", fairness=Fairness(key="tenantId"))
async def rest_fair(ctx: WorkflowContext, inp: dict[str, Any]) -> None:
    return None


async def test_rest_start__fairness_key_overrides_the_inputs(
    client: Client, http: httpx.AsyncClient
) -> None:
    client.workflows.register(rest_fair)
    await client.workflows.sync_definitions()
    named = await http.post(
        "/v1/workflows/rest-fair/runs", json={"input": {"tenantId": "a"}, "fairnessKey": "acme"}
    )
    read = await http.post("/v1/workflows/rest-fair/runs", json={"input": {"tenantId": "a"}})
    too_long = await http.post(
        "/v1/workflows/rest-fair/runs", json={"input": {}, "fairnessKey": "x" * 256}
    )
    assert (named.status_code, read.status_code, too_long.status_code) == (201, 201, 422)
    keys = {
        r["run_id"]: r["fairness_key"]
        for r in await client.pool.fetch("SELECT run_id, fairness_key FROM ripple_runs")
    }
    assert keys == {named.json()["runId"]: "acme", read.json()["runId"]: "a"}
    spec = (await http.get("/openapi.json")).json()
    assert "fairnessKey" in spec["components"]["schemas"]["StartRun"]["properties"]
