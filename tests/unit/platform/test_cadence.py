"""Schedule tick maths: cron in a time zone across DST, fixed intervals, catch-up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ripple.platform.errors import InvalidInput
from ripple.workflows.authoring.schedule import Schedule, latest_tick, next_tick


def _ticks(cron: str, tz: str, start: datetime, n: int) -> list[datetime]:
    out, at = [], start
    for _ in range(n):
        at = next_tick(at, cron=cron, every_seconds=None, timezone=tz)
        out.append(at)
    return out


def test_cadence__cron_keeps_local_time_across_spring_forward() -> None:
    # Berlin moves from UTC+1 to UTC+2 on 2026-03-29: 03:00 local is 02:00Z, then 01:00Z
    ticks = _ticks("0 3 * * *", "Europe/Berlin", datetime(2026, 3, 27, 12, tzinfo=UTC), 3)
    assert ticks == [
        datetime(2026, 3, 28, 2, tzinfo=UTC),
        datetime(2026, 3, 29, 1, tzinfo=UTC),
        datetime(2026, 3, 30, 1, tzinfo=UTC),
    ]


def test_cadence__a_skipped_local_time_fires_after_the_gap_and_a_repeated_one_once() -> None:
    spring = _ticks("30 2 * * *", "Europe/Berlin", datetime(2026, 3, 28, 12, tzinfo=UTC), 2)
    # 02:30 does not exist on 2026-03-29: fires at 03:00 CEST (01:00Z)
    assert spring == [
        datetime(2026, 3, 29, 1, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]
    autumn = _ticks("30 2 * * *", "Europe/Berlin", datetime(2026, 10, 24, 12, tzinfo=UTC), 2)
    # 02:30 happens twice on 2026-10-25: fires once, at the first (CEST, 00:30Z)
    assert autumn == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC),
    ]


def test_cadence__every_ticks_are_aligned_to_the_epoch() -> None:
    at = datetime(2026, 1, 1, 0, 0, 7, 500_000, tzinfo=UTC)
    assert next_tick(at, cron=None, every_seconds=10, timezone="UTC") == at.replace(
        second=10, microsecond=0
    )
    assert next_tick(
        at.replace(second=10, microsecond=0), cron=None, every_seconds=10, timezone="UTC"
    ) == at.replace(second=20, microsecond=0)


def test_cadence__after_downtime_only_the_latest_missed_tick() -> None:
    due = datetime(2026, 1, 1, tzinfo=UTC)
    now = due + timedelta(hours=5, minutes=3)
    assert latest_tick(due, now, cron=None, every_seconds=60, timezone="UTC") == due + timedelta(
        hours=5, minutes=3
    )
    assert latest_tick(due, now, cron="0 * * * *", every_seconds=None, timezone="UTC") == (
        due + timedelta(hours=5)
    )
    assert latest_tick(due, due, cron="0 * * * *", every_seconds=None, timezone="UTC") == due


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "not cron"}, "cron"),
        ({}, "cron"),
        ({"cron": "* * * * *", "every": 1}, "cron"),
        ({"every": 0}, "every"),
        ({"every": timedelta(seconds=-5)}, "every"),
        ({"every": 1, "timezone": "Mars/Olympus"}, "timezone"),
        ({"every": 1, "overlap": "queue"}, "overlap"),
    ],
)
def test_cadence__bad_schedules_are_invalid_input(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        Schedule(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert info.value.field == field
