"""`Schedule` (a cron expression or a fixed interval, in a time zone) and its tick maths; pure:
no I/O, no clock (callers pass "now"). Cron expressions are parsed by `cronsim` in the
schedule's `zoneinfo` zone, so DST is handled the way cron users expect: a local time that a
spring-forward skips fires at the first time after the gap, one that a fall-back repeats fires
once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from ripple.platform.errors import InvalidInput

__all__ = ["MIN_EVERY_SECONDS", "Schedule", "check_timezone", "latest_tick", "next_tick"]

Overlap = Literal["skip", "allow"]
#: Shortest `every`: ticks are counted from the Unix epoch in microsecond timestamps, and a
#: far shorter interval overflows that count.
MIN_EVERY_SECONDS = 0.001
#: Upper bound on cron ticks walked to find the latest missed one (a minutely cron after ~70 days).
_MAX_WALK = 100_000


def check_timezone(name: Any) -> ZoneInfo:
    """The zone named `name`, or InvalidInput."""
    if not isinstance(name, str) or not name:
        raise InvalidInput(
            "timezone must be an IANA name such as 'Europe/Berlin'", field="timezone"
        )
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidInput(
            f"unknown timezone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'",
            field="timezone",
        ) from None


@dataclass(frozen=True, slots=True)
class Schedule:
    """When to start a workflow (or publish an event): exactly one of `cron` or `every`.

    Args:
        cron: a 5-field cron expression (`"0 3 * * *"`), read in `timezone`.
        every: a fixed interval (timedelta or seconds, > 0), counted from the Unix epoch, so
            every process agrees on the ticks (`every=60` fires on the minute).
        timezone: IANA zone name for `cron` (default UTC).
        input: the input of each run (a workflow schedule) or the payload (a topic schedule).
        overlap: `"skip"` skips a tick while the run of the previous tick is still active;
            `"allow"` starts it anyway.
    """

    cron: str | None = None
    every: timedelta | float | None = None
    timezone: str = "UTC"
    input: Any = None
    overlap: Overlap = "skip"

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every is None):
            raise InvalidInput("give a schedule exactly one of `cron` or `every`", field="cron")
        if self.cron is not None:
            if not isinstance(self.cron, str):
                raise InvalidInput("cron must be a string such as '0 3 * * *'", field="cron")
            try:
                CronSim(self.cron, datetime(2000, 1, 1, tzinfo=UTC))
            except CronSimError as exc:
                raise InvalidInput(
                    f"invalid cron expression {self.cron!r}: {exc}", field="cron"
                ) from None
        if self.every is not None:
            secs = self.every_seconds
            if secs is None or not secs >= MIN_EVERY_SECONDS or math.isinf(secs):
                raise InvalidInput(
                    f"every must be a duration of at least {MIN_EVERY_SECONDS} s, got "
                    f"{self.every!r}",
                    field="every",
                )
        check_timezone(self.timezone)
        if self.overlap not in ("skip", "allow"):
            raise InvalidInput("overlap must be 'skip' or 'allow'", field="overlap")

    @property
    def every_seconds(self) -> float | None:
        if self.every is None:
            return None
        if isinstance(self.every, timedelta):
            return self.every.total_seconds()
        try:
            return float(self.every)
        except (TypeError, ValueError):
            raise InvalidInput("every must be a timedelta or seconds", field="every") from None


def next_tick(
    after: datetime, *, cron: str | None, every_seconds: float | None, timezone: str
) -> datetime:
    """The first tick strictly after `after` (an aware datetime), in UTC."""
    if every_seconds is not None:
        epoch = after.timestamp()
        n = math.floor(epoch / every_seconds) + 1
        return datetime.fromtimestamp(n * every_seconds, UTC)
    assert cron is not None
    local = after.astimezone(check_timezone(timezone))
    return next(CronSim(cron, local)).astimezone(UTC)


def latest_tick(
    due: datetime,
    now: datetime,
    *,
    cron: str | None,
    every_seconds: float | None,
    timezone: str,
) -> datetime:
    """The most recent tick at or before `now`, given that `due` (<= now) is a tick: after
    downtime only this one fires, not every missed tick."""
    if every_seconds is not None:
        missed = math.floor((now - due).total_seconds() / every_seconds)
        return datetime.fromtimestamp(due.timestamp() + missed * every_seconds, UTC)
    tick = due
    for _ in range(_MAX_WALK):
        following = next_tick(tick, cron=cron, every_seconds=None, timezone=timezone)
        if following > now:
            return tick
        tick = following
    return tick
