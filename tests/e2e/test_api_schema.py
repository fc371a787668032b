"""Property-based conformance: schemathesis drives a real `ripple serve` from its OpenAPI spec.

Every operation gets a small, bounded number of generated requests, valid and invalid, checked
with every schemathesis check: no 5xx; status, content type, headers and body as documented;
schema-valid requests accepted (`positive_data_acceptance`) and schema-violating ones refused
(`negative_data_rejection`). Methods a path does not document answer 405 with an `Allow` header
listing exactly the documented ones, and `OPTIONS` answers with that `Allow` (schemathesis's own
`unsupported_method` check only fires in its coverage phase, so the test sends them itself).

Long-poll receives are excluded, and a generated `wait` on the run long-polls is cut to 1 s: a
longer one makes the run slower (past the client's timeout), not more thorough (those routes are
exercised in test_api.py and the operating-runs tests).
"""

from __future__ import annotations

import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import CHECKS as REGISTRY
from schemathesis.checks import (
    load_all_checks,
    negative_data_rejection,
    positive_data_acceptance,
)
from schemathesis.core.failures import Failure

from tests.e2e.conftest import TOKEN, ApiServer

EXAMPLES_PER_OPERATION = 8
SKIPPED = {("POST", "/v1/queues/{queue}/messages/receive")}
HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

# Rules JSON Schema cannot state, checked by the server with a 422 naming the field. A schema-
# valid request may break them; every other 422 to a schema-valid request fails the test.
SEMANTIC_FIELDS: dict[tuple[str, str], set[str]] = {
    # cron syntax and IANA zone names
    ("POST", "/v1/schedules"): {"cron", "timezone"},
    # the input is checked against the workflow's own input type
    ("POST", "/v1/workflows/{name}/runs"): {"input"},
    ("POST", "/v1/runs/{run_id}/fork"): {"input", "from_step", "fromStep"},
    # webhook URLs must resolve outside the blocked networks; a backfill or replay must start
    # within the event retention (relative to now)
    ("POST", "/v1/subscriptions"): {"url", "target", "backfill_since"},
    ("POST", "/v1/subscriptions/{subscription_id}/replay"): {"since"},
    # the run search grammar (docs/search.md)
    ("GET", "/v1/runs"): {"where"},
    ("GET", "/v1/workflows/{name}/runs"): {"where"},
    # an event search's `where` is a JSON object; its window ends after it starts and spans at
    # most 31 days (relative to now when `until` is left out)
    ("GET", "/v1/events"): {"where", "since"},
}
#: On every operation: U+0000 in a JSON payload's string (Postgres text cannot hold it;
#: recognised by the 422's detail). Names, keys and cursors declare their patterns instead.
ANY_OPERATION_FIELDS = {"<nul>"}


def _semantic_fields(response: Any) -> set[str]:
    if response.status_code != 422:
        return set()
    try:
        errors = response.json().get("errors") or []
    except ValueError:
        return set()
    fields = {str(e["loc"][-1]) for e in errors if e.get("loc")}
    detail = str(response.json().get("detail", ""))
    if "U+0000" in detail or "\\u0000 cannot be converted to text" in detail:
        fields = {"<nul>"}
    return fields or {"<none>"}


def _positive_data_acceptance(allowed: set[str]) -> Any:
    """`positive_data_acceptance`, tolerating a 422 only for the semantic fields listed, and the
    documented 414 for a request target over the limit."""

    def check(ctx: Any, response: Any, case: Any) -> bool | None:
        if response.status_code == 414:  # a valid query text may be longer than the target limit
            return None
        try:
            return positive_data_acceptance(ctx, response, case)
        except Failure:
            fields = _semantic_fields(response)
            if fields and fields <= allowed | ANY_OPERATION_FIELDS:
                return None
            raise

    return check


def _negative_data_rejection(ctx: Any, response: Any, case: Any) -> bool | None:
    """`negative_data_rejection`, also taking the documented 414: a schema-violating value may
    make the request target longer than the server reads."""
    if response.status_code == 414:
        return None
    return negative_data_rejection(ctx, response, case)


def test_api_schema__every_check_passes_on_every_operation(api_server: ApiServer) -> None:
    load_all_checks()
    schema = schemathesis.openapi.from_url(f"{api_server.url}/openapi.json")
    headers = {"Authorization": f"Bearer {TOKEN}"}
    operations = [result.ok() for result in schema.get_all_operations()]  # type: ignore[union-attr]
    assert len(operations) > 25
    failures: list[str] = []
    for operation in operations:
        key = (operation.method.upper(), operation.path)
        if key in SKIPPED:
            continue
        replaced = (positive_data_acceptance, negative_data_rejection)
        checks = [c for c in REGISTRY.get_all() if c not in replaced]
        checks.append(_positive_data_acceptance(SEMANTIC_FIELDS.get(key, set())))
        checks.append(_negative_data_rejection)
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
            case.call_and_validate(headers=headers, checks=checks, timeout=30)  # noqa: B023

        try:
            check()
        except (AssertionError, BaseExceptionGroup) as exc:  # report every operation's failures
            parts = [str(e) for e in exc.exceptions] if isinstance(exc, BaseExceptionGroup) else []
            detail = "\n".join([str(exc), *parts])
            failures.append(f"{key[0]} {key[1]}: {detail}")
    assert not failures, (
        "\n\n".join(failures) + "\n\nserver log:\n" + api_server.process.text()[-4000:]
    )


def _concrete(path: str) -> str:
    """A request path for an OpenAPI path template (valid-looking values for each parameter)."""
    values = {
        "{name}": "onboard-user",
        "{run_id}": "0193c2a4-0000-7000-8000-000000000000",
        "{signal}": "approved",
        "{topic}": "user.signup",
        "{queue}": "audit",
        "{receipt}": "1.1",
        "{subscription_id}": "00000000-0000-4000-8000-000000000000",
        "{delivery_id}": "00000000-0000-4000-8000-000000000000",
        "{token_id}": "00000000-0000-4000-8000-000000000000",
        "{token}": "cnVuLzE.c2lnbmF0dXJl",
    }
    for template, value in values.items():
        path = path.replace(template, value)
    assert "{" not in path, f"no test value for a parameter of {path}"
    return path


def test_api_schema__undocumented_methods_get_405_and_options_lists_the_documented(
    api_server: ApiServer,
) -> None:
    spec = httpx.get(f"{api_server.url}/openapi.json").json()
    headers = {"Authorization": f"Bearer {TOKEN}"}
    wrong: list[str] = []
    with httpx.Client(base_url=api_server.url, headers=headers, timeout=30) as http:
        for template, item in spec["paths"].items():
            path = _concrete(template)
            documented = {m.upper() for m in item}
            expected = documented | {"OPTIONS"} | ({"HEAD"} if "GET" in documented else set())
            options = http.options(path)
            allow = {m.strip() for m in options.headers.get("allow", "").split(",") if m.strip()}
            if options.status_code != 204 or allow != expected:
                wrong.append(f"OPTIONS {template}: {options.status_code}, Allow {sorted(allow)}")
            for method in set(HTTP_METHODS) - documented:
                response = http.request(method, path)
                allow = {
                    m.strip() for m in response.headers.get("allow", "").split(",") if m.strip()
                }
                if response.status_code != 405 or allow != expected:
                    wrong.append(
                        f"{method} {template}: {response.status_code}, Allow {sorted(allow)}"
                    )
    assert not wrong, "\n".join(wrong)


def _raw_get(url: str, target: str) -> bytes:
    """Send `GET target` on a fresh connection and return the whole answer (raw bytes)."""
    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        request = f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        sock.sendall(request.encode())
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_api_schema__over_long_request_targets_get_414_not_a_reset(api_server: ApiServer) -> None:
    for target in (
        "/v1/topics/" + "a" * 10_240 + "/events",
        "/healthz?" + "x=1&" * 50_000,
        "/readyz/" + "b" * 100_000,
    ):
        answer = _raw_get(api_server.url, target)
        assert answer.startswith(b"HTTP/1.1 414 "), answer[:300]
        assert b"application/problem+json" in answer
    spec = httpx.get(f"{api_server.url}/openapi.json").json()
    for item in spec["paths"].values():
        for operation in item.values():
            assert "414" in operation["responses"]
