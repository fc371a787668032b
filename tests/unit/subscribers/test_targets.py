"""Subscription targets: the JSON form of a webhook's retry policy takes only its JSON types."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from ripple.subscribers.targets import WebhookTarget

URL = "https://example.com/hook"


@pytest.mark.parametrize(
    ("retry", "field"),
    [
        ({"maxAttempts": "3"}, "maxAttempts"),
        ({"maxAttempts": True}, "maxAttempts"),
        ({"maxAttempts": 1.5}, "maxAttempts"),
        ({"initialInterval": "1"}, "initialInterval"),
        ({"jitter": False}, "jitter"),
        ({"nonRetryable": "ValueError"}, "nonRetryable"),
        ({"nonRetryable": ["ValueError", 1]}, "nonRetryable"),
    ],
)
def test_webhook_target__retry_json_of_the_wrong_type_is_refused(
    retry: dict[str, Any], field: str
) -> None:
    # Without the check these were coerced (int("3"), int(True), int(1.5), a string's letters).
    with pytest.raises(ValidationError, match=f"{field} must be a JSON"):
        WebhookTarget(URL, retry=retry)


def test_webhook_target__retry_json_of_the_right_types_is_taken() -> None:
    target = WebhookTarget(
        URL,
        retry={
            "maxAttempts": 5,
            "initialInterval": 1,
            "backoffCoefficient": 2.0,
            "maxInterval": 30,
            "jitter": 0,
            "nonRetryable": ["ValueError"],
        },
    )
    assert target.retry is not None
    assert target.retry.max_attempts == 5
    assert target.retry.non_retryable == ("ValueError",)
    assert WebhookTarget(URL, retry={"maxAttempts": 4.0}).retry.max_attempts == 4  # type: ignore[union-attr]
