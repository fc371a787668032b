import signal, time
from tests.e2e.resilience.test_resilience import _recorded
from tests.e2e.resilience import app
from tests.helpers import assert_eventually

async def test_t(client, effects, workers):
    t0=time.monotonic()
    def T(m): print("T", m, round(time.monotonic()-t0,2), flush=True)
    w1 = await workers.start(); T("w1 ready")
    handle = await client.start(app.gated, {"gate": "g"}); T("started")
    run_id = handle.run_id
    await assert_eventually(lambda: effects.count(run_id, "slow.started", w1.pid)); T("slow started")
    await assert_eventually(lambda: _recorded(client, run_id, "first")); T("first rec")
    w1.send(signal.SIGKILL)
    await w1.wait_exit(); T("killed")
    w2 = await workers.start(); T("w2 ready")
    await assert_eventually(lambda: effects.count(run_id, "slow.started", w2.pid), timeout=20); T("w2 slow started")
    await effects.open_gate("g")
    out = await handle.result(timeout=30); T("result")
