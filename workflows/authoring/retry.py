"""`RetryPolicy` and its backoff maths; pure (no I/O, no clock, randomness injected)."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta

__all__ = ["RetryPolicy", "seconds"]


def seconds(value: timedelta | float | int) -> float:
    """A duration given as `timedelta` or seconds, in seconds."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    return float(value)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often, and how far apart, a failed step (or run, or webhook delivery) is retried.

    Args:
        max_attempts: total attempts including the first; `0` means unlimited.
        initial_interval: wait before the second attempt (timedelta or seconds).
        backoff_coefficient: each later wait is the previous one times this.
        max_interval: cap on any single wait.
        jitter: fraction of the wait randomised either way (0.2 = ±20 %).
        non_retryable: exception type names (or types) that fail at once.
    """

    max_attempts: int = 3
    initial_interval: timedelta | float = 1.0
    backoff_coefficient: float = 2.0
    max_interval: timedelta | float = 60.0
    jitter: float = 0.2
    non_retryable: Sequence[str | type[BaseException]] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.max_attempts < 0:
            raise ValueError("max_attempts must be >= 0 (0 means unlimited)")
        if seconds(self.initial_interval) < 0 or seconds(self.max_interval) < 0:
            raise ValueError("intervals must not be negative")
        if self.backoff_coefficient < 1:
            raise ValueError("backoff_coefficient must be >= 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def allows(self, attempt: int) -> bool:
        """Whether attempt number `attempt` (1-based) may run."""
        return self.max_attempts == 0 or attempt <= self.max_attempts

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to wait after failed attempt `attempt` (1-based) before the next one."""
        base = seconds(self.initial_interval) * self.backoff_coefficient ** max(0, attempt - 1)
        base = min(base, seconds(self.max_interval))
        if self.jitter and base > 0:
            spread = base * self.jitter
            base += (rng or random).uniform(-spread, spread)
        return max(0.0, base)

    def is_retryable(self, exc: BaseException) -> bool:
        """False if `exc` (or a base class of it) is named in `non_retryable`."""
        names = {t if isinstance(t, str) else t.__name__ for t in self.non_retryable}
        return not any(cls.__name__ in names for cls in type(exc).__mro__)

    def to_json(self) -> dict[str, object]:
        """JSON form, stored with a run or subscription."""
        return {
            "maxAttempts": self.max_attempts,
            "initialInterval": seconds(self.initial_interval),
            "backoffCoefficient": self.backoff_coefficient,
            "maxInterval": seconds(self.max_interval),
            "jitter": self.jitter,
            "nonRetryable": [t if isinstance(t, str) else t.__name__ for t in self.non_retryable],
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> RetryPolicy:
        """Inverse of `to_json`."""
        return cls(
            max_attempts=int(data.get("maxAttempts", 3)),  # type: ignore[call-overload]
            initial_interval=float(data.get("initialInterval", 1.0)),  # type: ignore[arg-type]
            backoff_coefficient=float(data.get("backoffCoefficient", 2.0)),  # type: ignore[arg-type]
            max_interval=float(data.get("maxInterval", 60.0)),  # type: ignore[arg-type]
            jitter=float(data.get("jitter", 0.2)),  # type: ignore[arg-type]
            non_retryable=tuple(str(t) for t in data.get("nonRetryable", ()) or ()),  # type: ignore[attr-defined]
        )
