"""`RateLimit`: a count per period, shared by token rate limits and webhook endpoints; pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta

from ripple.platform.errors import InvalidInput

__all__ = ["RateLimit"]


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most `limit` operations per `per` (a timedelta or seconds).

    Args:
        limit: operations allowed per period (>= 1).
        per: the period, > 0.
    """

    limit: int
    per: timedelta | float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.limit, int) or isinstance(self.limit, bool) or self.limit < 1:
            raise InvalidInput(f"limit must be an integer >= 1, got {self.limit!r}", field="limit")
        secs = self.per.total_seconds() if isinstance(self.per, timedelta) else self.per
        if isinstance(secs, bool) or not isinstance(secs, int | float):
            raise InvalidInput("per must be a timedelta or seconds", field="per")
        if not secs > 0 or not math.isfinite(secs):
            raise InvalidInput(f"per must be a positive duration, got {self.per!r}", field="per")

    @property
    def seconds(self) -> float:
        """The period in seconds."""
        return self.per.total_seconds() if isinstance(self.per, timedelta) else float(self.per)

    @property
    def rate(self) -> float:
        """Operations per second."""
        return self.limit / self.seconds
