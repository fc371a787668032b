"""End to end: `ripple verify` replays the live journal against new code, reading only (as a
read-only role), and `ripple runs export` writes what `ripple.testing.replay` reads."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.testing import ReplayDiverged, replay_async
from ripple.workflows.runs.records import RunStatus
from ripple.workflows.runtime.worker import Worker
from tests.e2e.conftest import CliRunner, ripple_environment
from tests.e2e.verify_apps import code_a, code_b, code_c
from tests.helpers import assert_eventually

pytestmark = pytest.mark.timeout(300)

TABLES = ("ripple_runs", "ripple_steps", "ripple_waits", "ripple_signals", "ripple_audit")


@pytest.fixture
async def readonly_url(database_url: str) -> AsyncIterator[str]:
    """`database_url` as a role that may only read."""
    role = f"ro_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute(f"CREATE ROLE {role} LOGIN PASSWORD 'ro'")
        await conn.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        await conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
        parts = urlsplit(database_url)
        netloc = f"{role}:ro@{parts.hostname}:{parts.port or 5432}"
        yield urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    finally:
        await conn.execute(f"DROP OWNED BY {role}")
        await conn.execute(f"DROP ROLE {role}")
        await conn.close()


async def counts(database_url: str) -> dict[str, int]:
    conn = await asyncpg.connect(database_url)
    try:
        return {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in TABLES}
    finally:
        await conn.close()


async def record_runs(
    client: Client, *, completed: int, waiting: int
) -> tuple[list[str], list[str]]:
    """Runs of code A: `completed` approved and done, `waiting` still waiting for approval."""
    async with Worker(client, [code_a.ship], sweeper=False, webhooks=False, handle_signals=False):
        handles = [await client.start(code_a.ship, None) for _ in range(completed + waiting)]
        ids = [h.run_id for h in handles]

        async def all_waiting() -> bool:
            runs = [await client.get_run(i) for i in ids]
            return all(r is not None and r.status == RunStatus.WAITING for r in runs)

        await assert_eventually(all_waiting, timeout=30)
        done = ids[:completed]
        for run_id in done:
            await client.signal(run_id, "approve", {"by": "ann"})
        for run_id in done:
            assert await client.handle(run_id).result(timeout=30) == "shipped"
    return done, ids[completed:]


async def test_verify__a_reorder_fails_waiting_runs_and_a_patch_passes_reading_only(
    settings: Settings,
    database_url: str,
    readonly_url: str,
    redis_url: str,
    ripple_cli: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    effects = tmp_path / "effects.log"
    monkeypatch.setenv("RIPPLE_TEST_SIDE_EFFECTS", str(effects))
    async with Client(settings=settings) as client:
        done, waiting = await record_runs(client, completed=2, waiting=3)
    ran = effects.read_text()
    assert ran.count("charge") == 5
    before = await counts(database_url)
    env = ripple_environment(readonly_url, redis_url, RIPPLE_TEST_SIDE_EFFECTS=str(effects))

    broken = await ripple_cli(
        "verify", "--app", "tests.e2e.verify_apps.code_b", check=False, env=env
    )
    assert broken.returncode == 1, broken.stderr
    for run_id in waiting:
        line = next(x for x in broken.stdout.splitlines() if run_id in x)
        assert "diverges" in line
        assert "position 0" in line
    for run_id in done:  # completed runs diverge too, as warnings
        assert "warning" in next(x for x in broken.stdout.splitlines() if run_id in x)
    assert "5 run(s) checked: 3 active run(s) diverge, 2 warning(s)" in broken.stdout

    as_json = await ripple_cli(
        "verify", "--app", "tests.e2e.verify_apps.code_b", "--json", check=False, env=env
    )
    report = json.loads(as_json.stdout)
    assert (report["ok"], report["runsChecked"]) == (False, 5)
    by_run = {d["runId"]: d for d in report["divergences"]}
    assert set(by_run) == set(done) | set(waiting)
    assert by_run[waiting[0]] == {
        "runId": waiting[0],
        "workflow": "ship",
        "version": 1,
        "status": "waiting",
        "position": 0,
        "expected": "run 'reserve'",
        "actual": "run 'charge'",
    }

    patched = await ripple_cli("verify", "--app", "tests.e2e.verify_apps.code_c", env=env)
    assert "5 run(s) checked: 0 active run(s) diverge, 0 warning(s)" in patched.stdout
    only_other = await ripple_cli(
        "verify",
        "--app",
        "tests.e2e.verify_apps.code_b",
        "--since",
        "1s",
        "--limit",
        "1",
        check=False,
        env=env,
    )
    assert only_other.returncode == 1  # the limit keeps one (active) run
    assert "1 run(s) checked" in only_other.stdout

    # No step body ran and nothing was written (the role cannot write anyway).
    assert effects.read_text() == ran
    assert await counts(database_url) == before

    # The same in Python, and an export replayed without a database.
    async with Client(settings=settings) as client:
        report_b = await client.verify([code_b.ship], since=3600)
        report_c = await client.verify([code_c.ship])
        assert not report_b.ok
        assert sorted(d.run_id for d in report_b.divergences if d.active) == sorted(waiting)
        assert report_c.ok
        assert report_c.runs_checked == 5
    exported = await ripple_cli("runs", "export", *waiting, done[0], env=env)
    path = tmp_path / "runs.json"
    path.write_text(exported.stdout)
    doc = json.loads(exported.stdout)
    assert (doc["format"], doc["version"]) == ("ripple.runs", 1)
    assert [r["runId"] for r in doc["runs"]] == [*waiting, done[0]]
    assert (await replay_async(code_c.ship, path)).runs_checked == 4
    with pytest.raises(ReplayDiverged) as diverged:
        await replay_async(code_b.ship, path)
    assert len(diverged.value.report.divergences) == 4
    by_workflow = await ripple_cli("runs", "export", "--workflow", "ship", "--since", "1h", env=env)
    assert len(json.loads(by_workflow.stdout)["runs"]) == 5
    assert effects.read_text() == ran

    # The worker of code A is gone: its three waiting runs have no live worker.
    versions = json.loads((await ripple_cli("workflows", "versions", "--json", env=env)).stdout)
    [ship] = versions
    assert ship["workflow"] == "ship"
    assert ship["stranded"] is True
    assert ship["versions"][0]["activeRuns"] == 3
    assert ship["versions"][0]["byStatus"] == {"waiting": 3}
