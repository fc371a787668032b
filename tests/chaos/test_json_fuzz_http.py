"""JSON fuzz against a real `ripple serve` over TCP: no answer is a server error, and the
keep-alive connection stays usable whatever was sent.

Bodies are JSON text from the generator of `tests/integration/test_json_input_validity.py`
(lone UTF-16 surrogates, NUL, numbers out of range, deep nesting), plus text that is not JSON at
all (cut short, invalid escapes, bytes that are not UTF-8), sent to the four write routes
(publish, start, run signal, queue send) over one connection. The integration test checks what
is stored; this one counts the answers by class, through uvicorn and the HTTP parser.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.chaos.conftest import FULL
from tests.chaos.figures import record
from tests.e2e.conftest import REPO_ROOT, Process, base_env, free_port, wait_healthy
from tests.integration.test_json_input_validity import JSON_TEXT
from tests.servers import PostgresCluster

EXAMPLES = 600 if FULL else 150
IDLE = "json-fuzz-idle"
ENTRIES = ("publish", "start", "signal", "send")


def _broken(text: str, cut: int) -> bytes:
    """Not JSON: the text cut short, an invalid escape spliced in, or bytes that are not UTF-8."""
    data = text.encode("utf-8", "surrogatepass")
    variants = [data[: max(0, len(data) - 1 - cut % 3)], b'"\\x41"' + data, data + b"\xff\xfe"]
    return variants[cut % len(variants)]


BODIES = st.one_of(
    JSON_TEXT.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.builds(_broken, JSON_TEXT, st.integers(min_value=0, max_value=8)),
)


def _request(entry: str, body: bytes, run_id: str) -> tuple[str, bytes]:
    if entry == "publish":
        return "/v1/topics/fuzz.event/events", b'{"payload": ' + body + b"}"
    if entry == "start":
        return f"/v1/workflows/{IDLE}/runs", b'{"input": ' + body + b"}"
    if entry == "signal":
        return f"/v1/runs/{run_id}/signals/go", body
    return "/v1/queues/fuzz-q/messages", b'{"body": ' + body + b"}"


@pytest.fixture
def fuzz_api(cluster: PostgresCluster, tmp_path: Path) -> Iterator[str]:
    """A `ripple serve` subprocess on the test's own cluster (it applies the migrations)."""
    port = free_port()
    env = base_env(RIPPLE_DATABASE_URL=cluster.url, RIPPLE_LOG_LEVEL="warning")
    process = Process(
        ["serve", "--host", "127.0.0.1", "--port", str(port)], env, REPO_ROOT, tmp_path / "log"
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process)
        yield url
    finally:
        process.stop()


@pytest.mark.timeout(300 if FULL else 120)
def test_json_fuzz_over_http__no_server_error_and_the_connection_stays_usable(
    fuzz_api: str,
) -> None:
    answers: Counter[str] = Counter()
    # One connection: a reset or a framing error after any answer fails the next request.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    with httpx.Client(base_url=fuzz_api, limits=limits, timeout=30) as http:
        started = http.post(f"/v1/workflows/{IDLE}/runs", json={"input": {}})
        assert started.status_code == 201, started.text
        run_id = started.json()["runId"]

        @settings(
            max_examples=EXAMPLES,
            derandomize=True,
            database=None,
            deadline=None,
            phases=[Phase.generate],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )
        @given(entry=st.sampled_from(ENTRIES), body=BODIES)
        def send(entry: str, body: bytes) -> None:
            path, content = _request(entry, body, run_id)
            answer = http.post(path, content=content, headers={"content-type": "application/json"})
            answers[f"{answer.status_code // 100}xx"] += 1
            assert answer.status_code < 500, (entry, body, answer.status_code, answer.text)
            if answer.status_code >= 400:
                assert answer.headers["content-type"] == "application/problem+json", answer.text

        send()
        assert http.get("/healthz").status_code == 200  # the same connection, still framed
    record(
        "json-fuzz-http",
        requests=answers.total(),
        responses_5xx=answers["5xx"],
        answers=dict(sorted(answers.items())),
    )
