"""`ProcessRunner`: services run side by side and stop together (on stop, or when one ends)."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from ripple.platform.ops.runner import ProcessRunner
from tests.helpers import assert_eventually


class Loop:
    """A service that runs until stopped, recording what happened to it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stops = 0
        self.running = asyncio.Event()
        self.returned = False
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        self.running.set()
        try:
            await self._stopping.wait()
            await asyncio.sleep(0)  # a graceful stop may take a moment
            self.returned = True
        finally:
            self.running.clear()

    def stop(self) -> None:
        self.stops += 1
        self._stopping.set()


class Failing(Loop):
    """Fails once `fail` is set (before its startup finished, if `ready` is not set)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.fail = asyncio.Event()
        self.ready = asyncio.Event()

    async def run(self) -> None:
        failing = asyncio.create_task(self.fail.wait())
        stopping = asyncio.create_task(self._stopping.wait())
        await asyncio.wait([failing, stopping], return_when=asyncio.FIRST_COMPLETED)
        failing.cancel()
        stopping.cancel()
        if self.fail.is_set():
            raise RuntimeError("boom")
        self.returned = True

    async def started(self) -> None:
        await self.ready.wait()


async def test_runner__stop_stops_every_service_once_and_returns() -> None:
    services = [Loop("a"), Loop("b"), Loop("c")]
    runner = ProcessRunner(services, handle_signals=False)
    main = asyncio.create_task(runner.run())
    for service in services:
        await asyncio.wait_for(service.running.wait(), 5)
    runner.stop()
    runner.stop()
    await asyncio.wait_for(main, 5)
    assert [(s.stops, s.returned) for s in services] == [(1, True)] * 3


async def test_runner__a_failing_service_stops_the_others_and_its_error_is_raised() -> None:
    ok, bad = Loop("ok"), Failing("bad")
    bad.ready.set()
    runner = ProcessRunner([ok, bad], handle_signals=False)
    main = asyncio.create_task(runner.run())
    await asyncio.wait_for(ok.running.wait(), 5)
    with capture_logs() as logs:
        bad.fail.set()
        with pytest.raises(RuntimeError, match="boom") as raised:
            await asyncio.wait_for(main, 5)
    assert ok.returned
    assert ok.stops == 1
    assert "raised by the bad service" in " ".join(raised.value.__notes__)
    failed = [e for e in logs if e["event"] == "service_failed"]
    assert [(e["service"], e["error"]) for e in failed] == [("bad", "RuntimeError: boom")]
    outcomes = {e["service"]: e["outcome"] for e in logs if e["event"] == "service_stopped"}
    assert outcomes == {"ok": "returned", "bad": "failed"}


async def test_runner__a_service_that_returns_stops_the_others_without_error() -> None:
    ok, done = Loop("ok"), Loop("done")
    runner = ProcessRunner([ok, done], handle_signals=False)
    main = asyncio.create_task(runner.run())
    await asyncio.wait_for(ok.running.wait(), 5)
    with capture_logs() as logs:
        done.stop()  # the service ends on its own, not through the runner
        await asyncio.wait_for(main, 5)
    assert ok.returned
    assert ok.stops == 1
    assert [e["service"] for e in logs if e["event"] == "service_exited"] == ["done"]


async def test_runner__stop_before_run_is_honoured() -> None:
    services = [Loop("a"), Loop("b")]
    runner = ProcessRunner(services, handle_signals=False)
    runner.stop()
    await asyncio.wait_for(runner.run(), 5)
    assert all(s.returned for s in services)


async def test_runner__on_started_waits_for_every_startup_and_never_runs_after_a_failure() -> None:
    started: list[str] = []
    loop, slow = Loop("loop"), Failing("slow")
    runner = ProcessRunner(
        [loop, slow], handle_signals=False, on_started=lambda: started.append("up")
    )
    main = asyncio.create_task(runner.run())
    await asyncio.wait_for(loop.running.wait(), 5)
    await asyncio.sleep(0)  # the loop service is up; `slow` is still starting
    assert started == []
    slow.ready.set()
    await assert_eventually(lambda: started == ["up"], timeout=5)
    runner.stop()
    await asyncio.wait_for(main, 5)

    never: list[str] = []
    loop, slow = Loop("loop"), Failing("slow")
    runner = ProcessRunner(
        [loop, slow], handle_signals=False, on_started=lambda: never.append("up")
    )
    main = asyncio.create_task(runner.run())
    slow.fail.set()  # fails before its startup completed
    with pytest.raises(RuntimeError):
        await asyncio.wait_for(main, 5)
    assert never == []
    assert loop.returned


async def test_runner__a_failing_startup_callback_stops_every_service_and_is_raised() -> None:
    services = [Loop("a"), Loop("b")]

    def broken() -> None:
        raise ValueError("banner failed")

    runner = ProcessRunner(services, handle_signals=False, on_started=broken)
    with capture_logs() as logs, pytest.raises(ValueError, match="banner failed"):
        await asyncio.wait_for(runner.run(), 5)
    assert all(s.returned for s in services)
    assert [e["event"] for e in logs].count("process_startup_failed") == 1
