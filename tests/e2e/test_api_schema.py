"""Property-based conformance: schemathesis drives a real `ripple serve` from its OpenAPI spec.

Every operation gets a small, bounded number of generated requests, valid and invalid; each
response must not be a 5xx and must conform to the spec (status code, content type, body
schema). Long-poll receives are excluded, and a generated `wait` on the run long-polls is cut
to 1 s: a longer one makes the run slower (past the client's timeout), not more thorough (those
routes are exercised in test_api.py and the operating-runs tests).
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.e2e.conftest import TOKEN, ApiServer

EXAMPLES_PER_OPERATION = 8
SKIPPED = {("POST", "/v1/queues/{queue}/messages/receive")}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def test_api_schema__no_5xx_and_responses_conform(api_server: ApiServer) -> None:
    schema = schemathesis.openapi.from_url(f"{api_server.url}/openapi.json")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) > 25
    failures: list[str] = []
    for operation in operations:
        if (operation.method.upper(), operation.path) in SKIPPED:
            continue
        strategy = st.one_of(
            operation.as_strategy(GenerationMode.POSITIVE),
            operation.as_strategy(GenerationMode.NEGATIVE),
        )

        @given(case=strategy)
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def check(case: Any) -> None:
            wait = (case.query or {}).get("wait")
            if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 1:
                case.query["wait"] = 1
            case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)

        try:
            check()
        except Exception as exc:  # collect all operations' failures, then report them together
            parts = [str(e) for e in exc.exceptions] if isinstance(exc, ExceptionGroup) else []
            detail = "\n".join([str(exc), *parts])
            failures.append(f"{operation.method.upper()} {operation.path}: {detail}")
    assert not failures, (
        "\n\n".join(failures) + "\n\nserver log:\n" + api_server.process.text()[-4000:]
    )
