"""The Python filter containment agrees with Postgres `jsonb @>` (property-based)."""

from __future__ import annotations

import asyncio
import json

import asyncpg
from hypothesis import given, settings
from hypothesis import strategies as st

from ripple.platform.events.topics import contains

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([1.0, 2.5, -0.0]),
    st.sampled_from(["a", "b", "1", ""]),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
    ),
    max_leaves=8,
)


def test_contains__agrees_with_postgres(pg_admin_url: str) -> None:
    loop = asyncio.new_event_loop()
    conn = loop.run_until_complete(asyncpg.connect(pg_admin_url))

    @settings(max_examples=600, deadline=None)
    @given(value=JSON, sub=JSON)
    def check(value: object, sub: object) -> None:
        expected = loop.run_until_complete(
            conn.fetchval(
                "SELECT $1::text::jsonb @> $2::text::jsonb", json.dumps(value), json.dumps(sub)
            )
        )
        assert contains(value, sub) is expected, (value, sub)

    try:
        check()
    finally:
        loop.run_until_complete(conn.close())
        loop.close()
