"""Dashboard sessions and CSRF tokens, the step timeline's geometry, spans and bounded counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ripple.platform.core.ids import new_id
from ripple.platform.ui.auth import SESSION_SECONDS, Sessions
from ripple.platform.ui.store import QueueCounts, uuid7_floor
from ripple.platform.ui.views import (
    LABEL_WIDTH,
    PLOT_WIDTH,
    ago,
    duration,
    sparkline,
    timeline,
    until,
)
from ripple.workflows.runs.records import Run, RunStatus, StepRecord, StepStatus


def test_session__round_trip_and_csrf() -> None:
    sessions = Sessions.for_tokens(["a", "b"])
    cookie = sessions.issue()
    nonce = sessions.nonce(cookie)
    assert nonce is not None
    assert sessions.csrf_valid(nonce, sessions.csrf(nonce))
    assert not sessions.csrf_valid(nonce, None)
    assert not sessions.csrf_valid(nonce, sessions.csrf(nonce + "x"))


def test_session__tampered_expired_or_other_key_is_refused() -> None:
    sessions = Sessions.for_tokens(["a"])
    cookie = sessions.issue(now=1_000.0)
    expires, nonce, principal, sig = cookie.split(".")
    assert sessions.nonce(cookie, now=1_000.0 + SESSION_SECONDS - 1) == nonce
    assert sessions.nonce(cookie, now=1_000.0 + SESSION_SECONDS + 1) is None
    assert sessions.nonce(f"{int(expires) + 999}.{nonce}.{principal}.{sig}", now=1_000.0) is None
    # the principal is signed: a read-only session cannot be turned into an admin one
    assert sessions.session(f"{expires}.{nonce}.env.{sig}", now=1_000.0) is None
    token_session = sessions.issue("0b6f5a0e-token-id", now=1_000.0)
    assert sessions.session(token_session, now=1_000.0) == (
        token_session.split(".")[1],
        "0b6f5a0e-token-id",
    )
    assert sessions.nonce("garbage", now=1_000.0) is None
    assert Sessions.for_tokens(["rotated"]).nonce(cookie, now=1_000.0) is None
    # the key derives from the tokens, not their order: every API process agrees
    assert Sessions.for_tokens(["b", "a"]).key == Sessions.for_tokens(["a", "b"]).key


def test_uuid7_floor__orders_ids_by_creation_time() -> None:
    before = datetime.now(UTC) - timedelta(seconds=1)
    created = new_id()
    assert uuid7_floor(before) < created < uuid7_floor(datetime.now(UTC) + timedelta(seconds=1))


def test_timeline__bars_span_start_to_completion() -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    run = Run(
        run_id="r",
        workflow="w",
        version=1,
        status=RunStatus.COMPLETED,
        input=None,
        output=None,
        error=None,
        attempt=1,
        created_at=t0,
        started_at=t0,
        completed_at=t0 + timedelta(seconds=10),
        parent_run_id=None,
    )
    steps = [
        StepRecord("a", "step", StepStatus.COMPLETED, 1, None, None, t0, t0 + timedelta(seconds=5)),
        StepRecord(
            "b",
            "sleep",
            StepStatus.COMPLETED,
            1,
            None,
            None,
            t0 + timedelta(seconds=5),
            t0 + timedelta(seconds=10),
        ),
    ]
    bars = timeline(run, steps, now=t0 + timedelta(seconds=20)).bars
    assert [(b.x, b.width) for b in bars] == [
        (LABEL_WIDTH, PLOT_WIDTH / 2),
        (LABEL_WIDTH + PLOT_WIDTH / 2, PLOT_WIDTH / 2),
    ]
    assert bars[1].y > bars[0].y


def test_sparkline__scales_the_largest_value_to_the_top() -> None:
    points = [p.split(",") for p in sparkline([0, 5, 10], width=100, height=40).split()]
    assert [(float(x), float(y)) for x, y in points] == [(0.0, 38.0), (50.0, 20.0), (100.0, 2.0)]
    assert sparkline([]) == ""


def test_ago_until_and_duration__read_as_rounded_spans() -> None:
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert ago(now - timedelta(seconds=30), now) == "30 s ago"
    assert ago(now - timedelta(hours=3), now) == "3 h ago"
    assert until(now + timedelta(minutes=10), now) == "in 10 min"
    assert until(now - timedelta(seconds=1), now) == "due now"
    assert until(None, now) == ""
    assert duration(7 * 86400) == "7 d"


def test_queue_counts__a_sampled_count_shows_as_a_lower_bound() -> None:
    exact = QueueCounts(visible=3, in_flight=1, delayed=0, dead_letters=2, oldest_age=1.0)
    assert (exact.shown("visible"), exact.shown("depth")) == ("3", "4")
    sampled = QueueCounts(5, 2, 0, 0, 0.0, lower_bounds=frozenset({"in_flight", "delayed"}))
    assert sampled.shown("in_flight") == "≥ 2"
    assert sampled.shown("visible") == "5"
    assert sampled.shown("depth") == "≥ 7"
