"""What one webhook attempt's result means: delivered, retry later, dead letter, or disable.

Pure rules (no I/O, randomness injected), following the Standard Webhooks / Svix conventions:
2xx is delivered; a redirect is a failure (never followed); 410 Gone disables the subscription;
429/502/503/504 honour `Retry-After` (seconds or an HTTP date, capped); every other failure retries
on the subscription's `RetryPolicy` or, by default, a schedule close to Svix's.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any, Final, Literal

from ripple.workflows.authoring.retry import RetryPolicy

__all__ = [
    "DEFAULT_SCHEDULE",
    "RETRY_AFTER_CAP",
    "Decision",
    "RetrySchedule",
    "decide",
    "parse_retry_after",
    "schedule_for",
]

#: Waits after attempts 1..7 (the first attempt is immediate): 5 s, 5 min, 30 min, 2 h, 5 h,
#: 10 h, 10 h -- eight attempts in all, ~27.6 h, like Svix.
DEFAULT_SCHEDULE: Final = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
DEFAULT_JITTER: Final = 0.1
#: Longest `Retry-After` honoured, in seconds.
RETRY_AFTER_CAP: Final = 6 * 3600.0
RETRY_AFTER_STATUSES: Final = frozenset({429, 502, 503, 504})

Action = Literal["delivered", "retry", "failed", "disable"]


@dataclass(frozen=True, slots=True)
class RetrySchedule:
    """The retry timing of one subscription: its RetryPolicy, or the default schedule."""

    policy: RetryPolicy | None = None

    def allows(self, attempt: int) -> bool:
        """Whether attempt number `attempt` (1-based) may run."""
        if self.policy is not None:
            return self.policy.allows(attempt)
        return attempt <= len(DEFAULT_SCHEDULE) + 1

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` before the next one."""
        if self.policy is not None:
            return self.policy.delay(attempt, rng)
        base = DEFAULT_SCHEDULE[min(max(attempt, 1), len(DEFAULT_SCHEDULE)) - 1]
        spread = base * DEFAULT_JITTER
        return max(0.0, base + (rng or random).uniform(-spread, spread))


def schedule_for(target: dict[str, Any]) -> RetrySchedule:
    """The schedule a stored webhook target asks for (`retry` is RetryPolicy.to_json or null)."""
    retry = target.get("retry")
    if isinstance(retry, dict):
        return RetrySchedule(RetryPolicy.from_json(retry))
    return RetrySchedule()


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds a `Retry-After` header asks for (delta-seconds or HTTP date), capped; or None."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    if value.isdigit():
        return min(float(value), RETRY_AFTER_CAP)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return min(max(0.0, (when - now).total_seconds()), RETRY_AFTER_CAP)


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a delivery after an attempt."""

    action: Action
    #: seconds until the next attempt (retry only)
    delay: float = 0.0
    #: why it was not delivered (stored as the delivery's last error)
    reason: str | None = None


def decide(
    *,
    attempt: int,
    status_code: int | None,
    error: str | None,
    retry_after: str | None,
    schedule: RetrySchedule,
    now: datetime,
    rng: random.Random | None = None,
) -> Decision:
    """The decision after attempt `attempt` ended with `status_code`, or `error` (no response)."""
    if status_code is not None and 200 <= status_code < 300:
        return Decision("delivered")
    if status_code == 410:
        return Decision("disable", reason="endpoint returned 410 Gone: subscription disabled")
    if status_code is None:
        reason = f"no response: {error or 'unknown error'}"
    elif 300 <= status_code < 400:
        reason = f"endpoint returned {status_code} (redirects are not followed)"
    else:
        reason = f"endpoint returned {status_code}"
    if not schedule.allows(attempt + 1):
        return Decision("failed", reason=f"{reason}; gave up after {attempt} attempts")
    delay = None
    if status_code in RETRY_AFTER_STATUSES:
        delay = parse_retry_after(retry_after, now)
    if delay is None:
        delay = schedule.delay(attempt, rng)
    return Decision("retry", delay=delay, reason=reason)
