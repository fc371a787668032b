"""Flow-control options of a workflow (`Concurrency`, `Throttle`, `Debounce`, `Fairness`) and the
key rule;
pure: no I/O. Postgres enforces them (see `store.claim_runs` and migration 0011):
this module only validates and describes them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ripple.platform.errors import InvalidInput
from ripple.workflows.authoring.retry import seconds

__all__ = [
    "MAX_PRIORITY",
    "Concurrency",
    "Debounce",
    "Fairness",
    "Throttle",
    "check_key_path",
    "check_priority",
    "flow_control_row",
]

#: Priorities are integers in [0, MAX_PRIORITY]; 0 is the default and the lowest.
MAX_PRIORITY = 1000
_KEY_PATH = re.compile(r"[A-Za-z0-9_-]{1,64}(\.[A-Za-z0-9_-]{1,64}){0,15}")


def check_key_path(key: str | None, field: str) -> str | None:
    """Return `key` if it is None or a dotted path into the input (`"customer.id"`)."""
    if key is None:
        return None
    if not isinstance(key, str) or not _KEY_PATH.fullmatch(key):
        raise InvalidInput(
            f"invalid key path {key!r}: use a dotted name such as 'customerId' or "
            "'customer.id' (letters, digits, '_' and '-' between the dots)",
            field=field,
        )
    return key


def _limit(value: Any, field: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidInput(f"{field} must be an integer >= 1, got {value!r}", field=field)
    return value


def _period(value: Any, field: str) -> float:
    try:
        secs = seconds(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"{field} must be a timedelta or seconds", field=field) from None
    if not secs > 0 or secs == float("inf"):
        raise InvalidInput(f"{field} must be a positive duration, got {value!r}", field=field)
    return secs


def check_priority(priority: Any) -> int:
    """Return `priority` if it is an integer in [0, MAX_PRIORITY], else raise InvalidInput."""
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidInput("priority must be an integer", field="priority")
    if not 0 <= priority <= MAX_PRIORITY:
        raise InvalidInput(f"priority must be 0-{MAX_PRIORITY} (higher first)", field="priority")
    return priority


@dataclass(frozen=True, slots=True)
class Concurrency:
    """At most `limit` runs per key are active at once (running, sleeping or waiting).

    Args:
        limit: active runs allowed per key (>= 1).
        key: dotted path into the run's input, read when the run is created; None: one key
            for every run of the workflow. A run whose input lacks the path gets the key "".
    """

    limit: int
    key: str | None = None

    def __post_init__(self) -> None:
        _limit(self.limit, "concurrency.limit")
        check_key_path(self.key, "concurrency.key")


@dataclass(frozen=True, slots=True)
class Throttle:
    """At most `limit` runs per key *start* within any `period`; the rest start later, in order.

    Args:
        limit: starts allowed per period and key (>= 1).
        period: the window (timedelta or seconds, > 0).
        key: dotted path into the input (None: one shared key).
    """

    limit: int
    period: timedelta | float
    key: str | None = None

    def __post_init__(self) -> None:
        _limit(self.limit, "throttle.limit")
        _period(self.period, "throttle.period")
        check_key_path(self.key, "throttle.key")

    @property
    def period_seconds(self) -> float:
        return seconds(self.period)


@dataclass(frozen=True, slots=True)
class Debounce:
    """Starts with the same key within `period` collapse into one run with the last input.

    The run starts once `period` passed without a new start, or `max_wait` after the first.

    Args:
        period: quiet time before the run starts (> 0).
        key: dotted path into the input (None: one shared key).
        max_wait: longest a run is pushed back after its first start (None: no limit).
    """

    period: timedelta | float
    key: str | None = None
    max_wait: timedelta | float | None = None

    def __post_init__(self) -> None:
        _period(self.period, "debounce.period")
        check_key_path(self.key, "debounce.key")
        if self.max_wait is not None:
            _period(self.max_wait, "debounce.max_wait")

    @property
    def period_seconds(self) -> float:
        return seconds(self.period)

    @property
    def max_wait_seconds(self) -> float | None:
        return None if self.max_wait is None else seconds(self.max_wait)


@dataclass(frozen=True, slots=True)
class Fairness:
    """Pending runs are claimed in a weighted round robin across keys (priority, then FIFO,
    within a key), so one key's backlog does not hold up the others.

    Args:
        key: dotted path into the run's input, read when the run is created (a start's
            `fairness_key` overrides it); None: one key unless a start names one. A run
            whose input lacks the path gets the key "".
        weights: a larger share for some keys, `{"acme": 3}`: three claims for each one of a
            key of weight 1 while both have runs pending (weights > 0; others weigh 1).
    """

    key: str | None = "tenantId"
    weights: Mapping[str, float] | None = None

    def __post_init__(self) -> None:
        check_key_path(self.key, "fairness.key")
        if self.weights is None:
            return
        if not isinstance(self.weights, Mapping):
            raise InvalidInput(
                "fairness.weights must be a dict of key -> weight", field="fairness.weights"
            )
        for name, weight in self.weights.items():
            if not isinstance(name, str):
                raise InvalidInput(
                    f"fairness.weights keys must be strings, got {name!r}", field="fairness.weights"
                )
            if (
                not isinstance(weight, int | float)
                or isinstance(weight, bool)
                or not 0 < weight < float("inf")
            ):
                raise InvalidInput(
                    f"fairness weight of {name!r} must be a number > 0, got {weight!r}",
                    field="fairness.weights",
                )


def check_fairness_key(key: Any) -> str | None:
    """Return a start's `fairness_key` if it is None or a string of at most 255 characters."""
    if key is not None and (not isinstance(key, str) or len(key) > 255 or "\x00" in key):
        raise InvalidInput(
            "fairness_key must be a string of at most 255 characters", field="fairness_key"
        )
    return key


def _path(key: str | None) -> list[str] | None:
    return None if key is None else key.split(".")


def flow_control_row(
    concurrency: Concurrency | None,
    throttle: Throttle | None,
    debounce: Debounce | None,
    fairness: Fairness | None = None,
) -> tuple[Any, ...] | None:
    """The `ripple_flow_controls` values of a workflow's options (None: it declares none):
    concurrency limit and key path, throttle limit, period and key path, debounce period,
    max wait and key path, whether it is fair, the fairness key path and weights."""
    if concurrency is None and throttle is None and debounce is None and fairness is None:
        return None
    return (
        None if concurrency is None else concurrency.limit,
        None if concurrency is None else _path(concurrency.key),
        None if throttle is None else throttle.limit,
        None if throttle is None else throttle.period_seconds,
        None if throttle is None else _path(throttle.key),
        None if debounce is None else debounce.period_seconds,
        None if debounce is None else debounce.max_wait_seconds,
        None if debounce is None else _path(debounce.key),
        fairness is not None,
        None if fairness is None else _path(fairness.key),
        None if fairness is None or not fairness.weights else dict(fairness.weights),
    )
