"""Where an event fans out: the compiled subscription set's targets per topic, remembered
only while no matching subscription has a filter (then they are the same for any payload)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ripple.platform.core.ids import new_id
from ripple.platform.events import subscriptions as subscriptions_module
from ripple.platform.events.subscription_store import SubscriptionRecord
from ripple.platform.events.subscriptions import _CompiledSet

NOW = datetime.now(UTC)


def _sub(
    pattern: str, kind: str, filter: dict[str, Any] | None = None, status: str = "active"
) -> SubscriptionRecord:
    return SubscriptionRecord(
        new_id(), pattern, kind, {"type": kind, "name": pattern}, filter, status, None, NOW, NOW
    )


def _ids(targets: Any) -> dict[str, list[str]]:
    return {kind: [row.id for row in rows] for kind, rows in targets.items()}


def test_targets__unfiltered_matches_are_grouped_once_per_topic() -> None:
    subs = [_sub("user.#", "queue"), _sub("user.*", "workflow"), _sub("user.signup", "queue")]
    compiled = _CompiledSet(subs, 1)
    first = compiled.targets("user.signup", {"a": 1})
    assert _ids(first) == {"queue": [subs[0].id, subs[2].id], "workflow": [subs[1].id]}
    # the same object for any payload of the topic: nothing matched or grouped again
    assert compiled.targets("user.signup", {"b": 2}) is first
    assert _ids(compiled.targets("user.deleted", {})) == {
        "queue": [subs[0].id],
        "workflow": [subs[1].id],
    }
    assert compiled.targets("billing.paid", {}) == {}


def test_targets__a_filter_is_checked_against_each_payload() -> None:
    plain, pro = _sub("user.*", "queue"), _sub("user.*", "webhook", {"plan": "pro"})
    compiled = _CompiledSet([plain, pro], 1)
    assert _ids(compiled.targets("user.signup", {"plan": "pro"})) == {
        "queue": [plain.id],
        "webhook": [pro.id],
    }
    assert _ids(compiled.targets("user.signup", {"plan": "free"})) == {"queue": [plain.id]}
    assert _ids(compiled.targets("user.signup", {"plan": "pro", "x": 1})) == {
        "queue": [plain.id],
        "webhook": [pro.id],
    }


def test_targets__only_active_subscriptions_and_a_paused_filter_does_not_matter() -> None:
    active = _sub("a.b", "queue")
    paused = _sub("a.*", "queue", {"k": 1}, status="paused")
    compiled = _CompiledSet([active, paused], 1)
    assert _ids(compiled.targets("a.b", {"k": 1})) == {"queue": [active.id]}
    assert compiled.targets("a.b", {"k": 2}) is compiled.targets("a.b", {"k": 1})


def test_targets__stay_right_past_the_memo_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subscriptions_module, "TARGETS_MEMO", 3)
    sub = _sub("t.*", "queue")
    compiled = _CompiledSet([sub], 1)
    for n in range(10):
        assert _ids(compiled.targets(f"t.n{n}", {})) == {"queue": [sub.id]}
        assert compiled.targets(f"x.n{n}", {}) == {}
