"""The json/jsonb codec: `db.loads` decodes exactly as `json.loads` does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ripple.platform.core.db import dumps, loads

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(_JSON, st.sampled_from(["", " ", "\n  "]), st.sampled_from([None, 1]))
def test_loads__agrees_with_json_loads(value: Any, pad: str, indent: int | None) -> None:
    # Postgres writes jsonb compactly but keeps a json column's text as given: whitespace too.
    text = pad + json.dumps(value, indent=indent, ensure_ascii=False) + pad
    assert loads(text) == json.loads(text)
    assert loads(dumps(value)) == value


@pytest.mark.parametrize("text", ["", "{", '{"a":1} x', "[1,]", "nul", "1 2"])
def test_loads__refuses_what_json_loads_refuses(text: str) -> None:
    with pytest.raises(json.JSONDecodeError):
        loads(text)
