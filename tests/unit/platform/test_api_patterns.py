"""The patterns the OpenAPI declares accept exactly what the server's own validators accept."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError

from ripple.platform.api.models import DateTimeIn
from ripple.platform.api.queues import QUEUE_NAME_PATTERN, RECEIPT_PATTERN
from ripple.platform.api.topics import SUBSCRIPTION_PATTERN, TOPIC_PATTERN
from ripple.platform.core.migrate import parse_migration_name
from ripple.platform.errors import InvalidInput
from ripple.platform.events.topics import validate_pattern, validate_topic
from ripple.platform.schedules.schedules import SCHEDULE_NAME, check_schedule_name
from ripple.subscribers import QueueTarget, WorkflowTarget
from ripple.subscribers.queues.queues import _parse_receipt, validate_queue_name
from ripple.workflows.authoring.definition import NAME_RE, check_workflow_name

SAMPLES = [
    "audit",
    "a",
    "A.b-c_d",
    "user.signup",
    "user.*",
    "billing.#",
    "#",
    "*",
    "a..b",
    ".a",
    "a.",
    "-a",
    "_a",
    "Audit",
    "a b",
    "a/b",
    "ü",
    "a\n",
    "audit\n",
    "user.signup\n",
    "nightly:report\n",
    "nightly:report",
    "a\r",
    "1.2",
    "12345678901234567890.1",
    "123456789012345678.123456789",
    "1.1234567890",
    "1.2.3",
    "1.",
    ".1",
    "\uff11.2",  # a fullwidth digit: str.isdigit() says yes, the receipt pattern no
    "1.²",
    "1.2\n",
    "+1.2",
    " 1.2",
    "x" * 128,
    "x" * 129,
    "",
]


def _accepts(validate: object, value: str) -> bool:
    try:
        validate(value)  # type: ignore[operator]
    except InvalidInput:
        return False
    return True


def _schema_pattern(model: type[BaseModel], field: str) -> str:
    pattern: str = model.model_json_schema()["properties"][field]["pattern"]
    return pattern


@pytest.mark.parametrize(
    ("pattern", "validate"),
    [
        (QUEUE_NAME_PATTERN, validate_queue_name),
        (TOPIC_PATTERN, validate_topic),
        (SUBSCRIPTION_PATTERN, validate_pattern),
        (RECEIPT_PATTERN, _parse_receipt),
        (NAME_RE.pattern, check_workflow_name),
        (f"^{SCHEDULE_NAME.pattern}$", check_schedule_name),
        (_schema_pattern(QueueTarget, "queue"), validate_queue_name),
        (_schema_pattern(WorkflowTarget, "workflow"), check_workflow_name),
    ],
)
def test_api_patterns__declared_pattern_matches_the_validator(
    pattern: str, validate: object
) -> None:
    for value in SAMPLES:
        # JSON Schema patterns are ECMA regexes searched in the value; `$` ends the text there.
        declared = re.search(pattern.replace("$", r"\Z"), value) is not None
        if pattern in (TOPIC_PATTERN, SUBSCRIPTION_PATTERN):
            declared = declared and len(value) <= 255
        assert declared == _accepts(validate, value), (pattern, value)


def test_api_patterns__date_times_are_rfc3339_with_an_offset_never_numbers() -> None:
    adapter = TypeAdapter(DateTimeIn)
    assert adapter.validate_python("2026-01-31T09:30:00Z") == datetime(
        2026, 1, 31, 9, 30, tzinfo=UTC
    )
    assert adapter.validate_json('"2026-01-31T09:30:00.5+02:00"').microsecond == 500_000
    for bad in ("0.5", 0, 0.5, "2026-01-31", "2026-01-31 09:30:00Z", "2026-01-31T09:30:00"):
        with pytest.raises(ValidationError):
            adapter.validate_python(bad)


def test_api_patterns__migration_file_names_are_matched_whole() -> None:
    assert parse_migration_name("0007_claim_index_per_workflow.sql") == (
        7,
        "claim_index_per_workflow",
    )
    # `$` alone would also match before a final newline; `\d` would take other scripts' digits.
    for other in ("0007_claim.sql\n", "0007_claim.sql.bak", "\u0660007_claim.sql", "7_a.sql"):
        assert parse_migration_name(other) is None, other
