"""schemathesis CLI hooks for a run against `ripple serve` (SCHEMATHESIS_HOOKS).

They keep two kinds of schema-valid requests fast and meaningful, and change nothing else:

- a long poll (`wait` on a run, on a queue receive) is cut to 1 s: a longer one makes the run
  slower, not more thorough (the long polls have their own tests);
- a time that must lie within the event retention (a subscription's `backfillSince`, a
  replay's `since`: a rule relative to now, which JSON Schema cannot state and the operations'
  descriptions give) is moved to an hour ago when it lies before the retention, and a replay's
  `until` that is not after its `since` (a rule between two fields) is dropped.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import schemathesis

#: Longest long poll a generated request keeps, in seconds.
MAX_WAIT = 1
#: Event retention of the server under test (RIPPLE_EVENT_RETENTION_DAYS, default 7), less a day.
RETAINED = timedelta(days=6)
#: Body fields whose time must lie within the event retention, by path template.
RETAINED_FIELDS = {
    "/v1/subscriptions": "backfillSince",
    "/v1/subscriptions/{subscription_id}/replay": "since",
}


def _long(value: Any) -> bool:
    """A number (or a query's numeric text) of seconds over MAX_WAIT."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return False
    try:
        return float(value) > MAX_WAIT
    except ValueError:
        return False


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _too_old(value: Any) -> bool:
    when = _time(value)
    return when is not None and when < datetime.now(UTC) - RETAINED


@schemathesis.hook
def before_call(ctx: Any, case: Any, kwargs: dict[str, Any]) -> None:
    if isinstance(case.query, dict) and _long(case.query.get("wait")):
        case.query["wait"] = MAX_WAIT
    if isinstance(case.body, dict):
        if case.path.endswith("/messages/receive") and _long(case.body.get("wait")):
            case.body["wait"] = MAX_WAIT
        field = RETAINED_FIELDS.get(case.path)
        if field is not None and _too_old(case.body.get(field)):
            case.body[field] = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
        since, until = _time(case.body.get("since")), _time(case.body.get("until"))
        if case.path.endswith("/replay") and since and until and until <= since:
            del case.body["until"]
