"""The error tree's contract with callers."""

from __future__ import annotations

import pytest

from ripple.platform.core.ids import check_idempotency_key
from ripple.platform.errors import InvalidInput, RippleError
from ripple.platform.events.topics import check_json, validate_pattern, validate_topic
from ripple.workflows.authoring.definition import check_workflow_name
from ripple.workflows.authoring.flow import check_key_path


def test_invalid_input__is_a_value_error_and_a_ripple_error() -> None:
    err = InvalidInput("bad", field="topic")
    assert isinstance(err, ValueError)
    assert isinstance(err, RippleError)
    assert err.field == "topic"


@pytest.mark.parametrize(
    "call",
    [
        lambda: validate_topic("Bad Topic"),
        lambda: validate_pattern("user.**"),
        lambda: check_workflow_name("Not A Name"),
        lambda: check_json({"x": float("nan")}, field="payload", max_depth=32),
    ],
)
def test_invalid_input__caught_by_except_value_error(call: object) -> None:
    with pytest.raises(ValueError, match=r"."):
        call()  # type: ignore[operator]


@pytest.mark.parametrize(
    "call",
    [
        lambda: check_workflow_name("orders\n"),
        lambda: check_key_path("customer.id\n", "key"),
        lambda: check_idempotency_key("k\x00"),
        lambda: check_idempotency_key(""),
        lambda: check_idempotency_key("k" * 256),
    ],
)
def test_names_and_keys__a_trailing_newline_or_nul_is_refused(call: object) -> None:
    # `re.match` with `^…$` accepts "name\n" ($ matches before a final newline): fullmatch.
    with pytest.raises(InvalidInput):
        call()  # type: ignore[operator]
