"""Outcome rules for one webhook attempt (pure)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from ripple.subscribers.webhooks.outcomes import (
    DEFAULT_SCHEDULE,
    RETRY_AFTER_CAP,
    RetrySchedule,
    decide,
    parse_retry_after,
    schedule_for,
)
from ripple.subscribers.webhooks.sending import DELIVERED
from ripple.workflows.authoring.retry import RetryPolicy

NOW = datetime(2025, 1, 1, tzinfo=UTC)


def _decide(status: int | None, attempt: int = 1, **kw: object):  # type: ignore[no-untyped-def]
    args: dict[str, object] = {
        "attempt": attempt,
        "status_code": status,
        "error": None,
        "retry_after": None,
        "schedule": RetrySchedule(),
        "now": NOW,
        "rng": random.Random(1),
    }
    args.update(kw)
    return decide(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize("status", [200, 201, 202, 204, 299])
def test_decide__2xx_is_delivered(status: int) -> None:
    assert _decide(status).action == "delivered"
    # The dispatcher answers a 2xx with DELIVERED without calling decide(): they must agree.
    assert _decide(status) == DELIVERED


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_decide__3xx_is_a_failure_not_followed(status: int) -> None:
    decision = _decide(status)
    assert decision.action == "retry"
    assert "redirects are not followed" in (decision.reason or "")


def test_decide__410_disables() -> None:
    assert _decide(410).action == "disable"


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_decide__retry_after_seconds_honoured(status: int) -> None:
    assert _decide(status, retry_after="42").delay == 42.0


def test_decide__retry_after_ignored_for_other_statuses() -> None:
    decision = _decide(500, retry_after="4242")
    assert decision.delay != 4242.0


def test_parse_retry_after__http_date_and_cap() -> None:
    later = format_datetime(NOW + timedelta(seconds=120), usegmt=True)
    assert parse_retry_after(later, NOW) == 120.0
    assert parse_retry_after("999999", NOW) == RETRY_AFTER_CAP
    assert parse_retry_after(format_datetime(NOW - timedelta(hours=1), usegmt=True), NOW) == 0.0
    assert parse_retry_after("soon", NOW) is None
    assert parse_retry_after(None, NOW) is None


def test_default_schedule__close_to_svix_with_jitter() -> None:
    schedule = RetrySchedule()
    rng = random.Random(7)
    for attempt, base in enumerate(DEFAULT_SCHEDULE, start=1):
        assert base * 0.9 <= schedule.delay(attempt, rng) <= base * 1.1
    assert schedule.allows(8)
    assert not schedule.allows(9)
    assert DEFAULT_SCHEDULE == (5, 300, 1800, 7200, 18000, 36000, 36000)


def test_decide__exhausted_default_schedule_fails() -> None:
    assert _decide(500, attempt=7).action == "retry"
    decision = _decide(500, attempt=8)
    assert decision.action == "failed"
    assert "gave up after 8 attempts" in (decision.reason or "")


def test_decide__connection_errors_retry() -> None:
    decision = _decide(None, error="ConnectError: refused")
    assert decision.action == "retry"
    assert decision.reason == "no response: ConnectError: refused"


def test_schedule_for__uses_subscription_retry_policy() -> None:
    policy = RetryPolicy(max_attempts=2, initial_interval=3.0, jitter=0.0)
    schedule = schedule_for({"retry": policy.to_json()})
    assert schedule.delay(1) == 3.0
    assert _decide(500, attempt=1, schedule=schedule).action == "retry"
    assert _decide(500, attempt=2, schedule=schedule).action == "failed"
    assert schedule_for({"retry": None}).policy is None
