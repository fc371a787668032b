"""JSON input is refused or stored faithfully, never a server error: lone UTF-16 surrogates
(`"\\ud800"`, which JSON can spell but no UTF-8 text or Postgres value can hold), NUL, numbers
out of the float range (`1e400`) or beyond it as integers (`10**400`), and deep nesting.

Every entry point, in Python (`publish`, `start`, `signal`, `queues.send`) and over REST (the same
four routes, through the whole ASGI stack), either refuses the value (`InvalidInput` / a 4xx
problem) with nothing written, or accepts it and stores a value equal to it as JSON. The fuzz
cases are generated as JSON *text*, so the REST routes see the escapes as a client sends them.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ripple.platform.client import Client
from ripple.platform.errors import InvalidInput
from ripple.workflows import WorkflowContext, workflow

TABLES = ("ripple_events", "ripple_runs", "ripple_signals", "ripple_queue_messages")
#: A workflow no worker serves: its runs stay pending and buffer the signals they get.
IDLE = "json-idle"


@workflow(name="json-echo")
async def json_echo(ctx: WorkflowContext, inp: Any) -> Any:
    return inp


async def _counts(client: Client) -> dict[str, int]:
    return {t: int(await client.pool.fetchval(f"SELECT count(*) FROM {t}")) for t in TABLES}


def _same_json(left: Any, right: Any) -> bool:
    """Equal as JSON values: numbers by their decimal value (Postgres `jsonb` keeps numbers as
    decimals, so `1e+308` reads back as the integer 10**308), booleans apart from numbers."""
    if isinstance(left, bool) or isinstance(right, bool):
        return type(left) is type(right) and left == right
    if isinstance(left, int | float) and isinstance(right, int | float):
        return Decimal(repr(left)) == Decimal(repr(right))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same_json(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_same_json, left, right))
    return type(left) is type(right) and bool(left == right)


# -- the concrete case ------------------------------------------------------------------------

LONE = ["\ud800", "\udfff", "a\udc00b"]
SURROGATE_VALUES: list[Any] = [
    LONE[0],
    {"s": LONE[1]},
    {LONE[2]: 1},  # in an object key
    [1, {"deep": [LONE[0]]}],
]


@pytest.mark.parametrize("bad", SURROGATE_VALUES, ids=["string", "value", "key", "deep"])
async def test_lone_surrogate_is_refused_by_every_python_entry_point(
    client: Client, bad: Any
) -> None:
    run_id = (await client.start(IDLE, {"ok": 1})).run_id
    before = await _counts(client)
    calls = [
        ("input", client.start(IDLE, bad)),
        ("input", client.start(json_echo, bad)),
        ("payload", client.signal(run_id, "go", bad)),
        ("payload", client.signal_matching("surrogate.event", bad)),
        ("payload", client.publish("surrogate.event", bad)),
        ("body", client.queues.send("surrogate-q", bad)),
        ("headers", client.queues.send("surrogate-q", {}, headers={"h": bad})),
    ]
    for field, call in calls:
        with pytest.raises(InvalidInput) as caught:
            await call
        assert caught.value.field == field
        assert "lone UTF-16 surrogate" in caught.value.message
    assert await _counts(client) == before


async def test_lone_surrogate_escape_is_a_422_on_every_rest_entry_point(
    client: Client, http: httpx.AsyncClient
) -> None:
    run_id = (await client.start(IDLE, {"ok": 1})).run_id
    before = await _counts(client)
    for bad in ('"\\ud800"', '{"\\uDC00": 1}', '["x\\udbff", "\\ud83d\\ude00"]'):
        posts = [
            (f"/v1/workflows/{IDLE}/runs", f'{{"input": {bad}}}'),
            (f"/v1/runs/{run_id}/signals/go", bad),
            (f"/v1/workflows/{IDLE}/runs/{run_id}/signals/go", bad),
            ("/v1/signals", f'{{"event": "surrogate.event", "payload": {bad}}}'),
            ("/v1/topics/surrogate.event/events", f'{{"payload": {bad}}}'),
            ("/v1/queues/surrogate-q/messages", f'{{"body": {bad}}}'),
            ("/v1/queues/surrogate-q/messages", f'{{"body": 1, "headers": {{"h": {bad}}}}}'),
        ]
        for path, body in posts:
            response = await http.post(
                path, content=body, headers={"content-type": "application/json"}
            )
            assert response.status_code == 422, (path, body, response.text)
            assert response.headers["content-type"] == "application/problem+json"
            assert "lone UTF-16 surrogate" in response.json()["detail"]
    assert await _counts(client) == before
    # A whole pair, escaped or not, and an escaped backslash before `ud800` are ordinary text.
    for text, value in [
        ('"\\ud83d\\ude00"', "\U0001f600"),
        ('"\\\\ud800"', "\\ud800"),
        ('"\U0001f600"', "\U0001f600"),
    ]:
        response = await http.post(
            "/v1/queues/surrogate-q/messages",
            content=f'{{"body": {text}}}'.encode(),
            headers={"content-type": "application/json"},
        )
        assert response.status_code == 201, response.text
        stored = await client.pool.fetchval(
            "SELECT body FROM ripple_queue_messages WHERE id = $1", int(response.json()["id"])
        )
        assert stored == value


# -- fuzzing ----------------------------------------------------------------------------------

_ESCAPES = st.sampled_from(
    [
        "\\ud800",  # lone high surrogate
        "\\uDFFF",  # lone low surrogate
        "\\udc00\\ud800",  # a pair in the wrong order: two lone ones
        "\\ud83d\\ude00",  # a whole pair (U+1F600)
        "\\u0000",  # NUL
        "\\\\ud800",  # an escaped backslash: the six characters `\ud800`
        "\\n",
        "\\u00e9",
        "\\/",
    ]
)
_PLAIN_TEXT = st.text(max_size=6).map(lambda s: json.dumps(s)[1:-1])
_RAW_TEXT = st.text(max_size=6).map(lambda s: json.dumps(s, ensure_ascii=False)[1:-1])
STRINGS = st.lists(st.one_of(_ESCAPES, _PLAIN_TEXT, _RAW_TEXT), max_size=4).map(
    lambda parts: '"' + "".join(parts) + '"'
)
NUMBERS = st.one_of(
    st.integers().map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(
        ["1e400", "-1E400", "1e-400", "10" + "0" * 399, "-" + "9" * 400, "-0", "0.5e1", "1.50"]
    ),
)
SCALARS = st.one_of(st.sampled_from(["null", "true", "false"]), NUMBERS, STRINGS)


def _nest(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    arrays = st.lists(inner, max_size=4).map(lambda items: "[" + ",".join(items) + "]")
    objects = st.lists(st.tuples(STRINGS, inner), max_size=4).map(
        lambda pairs: "{" + ",".join(f"{k}:{v}" for k, v in pairs) + "}"
    )
    return st.one_of(arrays, objects)


def _deep(text: str, levels: int) -> str:
    return "[" * levels + text + "]" * levels


#: JSON text: small documents of the parts above, and some nested 20 to 40 levels deep (the
#: limit, RIPPLE_MAX_JSON_DEPTH, is 32).
JSON_TEXT = st.one_of(
    st.recursive(SCALARS, _nest, max_leaves=8),
    st.builds(_deep, SCALARS, st.integers(min_value=20, max_value=40)),
)
FUZZ = settings(
    max_examples=30,
    derandomize=True,
    database=None,
    deadline=None,
    # No explain phase: tracing a failing example's server log renders slowly and adds nothing.
    phases=[Phase.explicit, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


async def _stored(client: Client, entry: str, ref: str) -> Any:
    """What `entry` stored under `ref` (an event, run or message id; the newest signal)."""
    if entry == "publish":
        sql = "SELECT payload FROM ripple_events WHERE id = $1::uuid"
        return await client.pool.fetchval(sql, ref)
    if entry == "start":
        run = await client.get_run(ref)
        assert run is not None
        return run.input
    if entry == "signal":
        return await client.pool.fetchval("SELECT payload FROM ripple_signals ORDER BY id DESC")
    return await client.pool.fetchval(
        "SELECT body FROM ripple_queue_messages WHERE id = $1", int(ref)
    )


def _expected(entry: str, value: Any) -> Any:
    """What `entry` stores for `value`: a signal without a payload (null) delivers `{}`."""
    return {} if entry == "signal" and value is None else value


async def _python_call(client: Client, entry: str, value: Any, run_id: str) -> str:
    if entry == "publish":
        return (await client.publish("fuzz.event", value)).event_id
    if entry == "start":
        return (await client.start(IDLE, value)).run_id
    if entry == "signal":
        await client.signal(run_id, "go", value)
        return ""
    return str(await client.queues.send("fuzz-q", value))


@pytest.mark.parametrize("entry", ["publish", "start", "signal", "send"])
@FUZZ
@given(text=JSON_TEXT)
async def test_python_entry_points_refuse_or_store_any_json(
    client: Client, entry: str, text: str
) -> None:
    value = json.loads(text)
    run_id = (await client.start(IDLE, {"ok": 1})).run_id if entry == "signal" else ""
    before = await _counts(client)
    try:
        ref = await _python_call(client, entry, value, run_id)
    except InvalidInput:
        assert await _counts(client) == before, text
        return
    assert _same_json(await _stored(client, entry, ref), _expected(entry, value)), text


def _rest_request(entry: str, text: str, run_id: str) -> tuple[str, str]:
    if entry == "publish":
        return "/v1/topics/fuzz.event/events", f'{{"payload": {text}}}'
    if entry == "start":
        return f"/v1/workflows/{IDLE}/runs", f'{{"input": {text}}}'
    if entry == "signal":
        return f"/v1/runs/{run_id}/signals/go", text
    return "/v1/queues/fuzz-q/messages", f'{{"body": {text}}}'


#: The answer's field naming what each route stored (a run signal answers no id).
_REF_FIELDS = {"publish": "eventId", "start": "runId", "send": "id"}


def _rest_ref(entry: str, answer: dict[str, Any]) -> str:
    return str(answer.get(_REF_FIELDS.get(entry, ""), ""))


@pytest.mark.parametrize("entry", ["publish", "start", "signal", "send"])
@FUZZ
@given(text=JSON_TEXT)
async def test_rest_entry_points_refuse_or_store_any_json(
    client: Client, http: httpx.AsyncClient, entry: str, text: str
) -> None:
    run_id = (await client.start(IDLE, {"ok": 1})).run_id if entry == "signal" else ""
    before = await _counts(client)
    path, body = _rest_request(entry, text, run_id)
    response = await http.post(
        path, content=body.encode(), headers={"content-type": "application/json"}
    )
    if 400 <= response.status_code < 500:
        assert response.headers["content-type"] == "application/problem+json", response.text
        assert await _counts(client) == before, (text, response.text)
        return
    assert response.status_code in (201, 202), (text, response.status_code, response.text)
    stored = await _stored(client, entry, _rest_ref(entry, response.json()))
    assert _same_json(stored, _expected(entry, json.loads(text))), text
