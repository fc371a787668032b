"""`Outage`: one warning when a lasting failure starts, a reminder per window, one line at the
end with the count and duration."""

from __future__ import annotations

import structlog

from ripple.platform.core.logs import Outage, get_logger


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_outage__one_warning_then_a_count_and_one_recovery_line() -> None:
    clock = _Clock()
    outage = Outage(get_logger("ripple.test"), "thing_failed", "thing_recovered", clock=clock)
    with structlog.testing.capture_logs() as entries:
        outage.recovered()  # nothing open: nothing logged
        for _ in range(5):
            outage.failed(OSError("refused"), path="/x")
            clock.now += 2
        outage.recovered()
        outage.recovered()
    assert [(e["event"], e["log_level"]) for e in entries] == [
        ("thing_failed", "warning"),
        ("thing_recovered", "info"),
    ]
    assert entries[0]["error"] == "OSError: refused"
    assert entries[0]["path"] == "/x"
    assert entries[1]["failures"] == 5
    assert entries[1]["duration_s"] == 10.0
    assert not outage.ongoing


def test_outage__reminds_once_per_window_while_it_lasts() -> None:
    clock = _Clock()
    outage = Outage(get_logger("ripple.test"), "thing_failed", "thing_recovered", clock=clock)
    with structlog.testing.capture_logs() as entries:
        for _ in range(130):
            outage.failed(None)
            clock.now += 1
    assert [e["event"] for e in entries] == ["thing_failed"] * 3
    assert [e.get("failures") for e in entries] == [None, 61, 121]
