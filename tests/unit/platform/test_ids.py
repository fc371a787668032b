"""Run, event and message ids: version 7 UUIDs that sort by creation."""

from __future__ import annotations

import time
import uuid
from unittest import mock

import pytest

from ripple.platform.core import ids


def test_uuid7__is_version_7_with_rfc_variant() -> None:
    value = ids.uuid7()
    assert value.version == 7
    assert value.variant == uuid.RFC_4122


def test_new_id__strictly_increasing_within_one_millisecond() -> None:
    with mock.patch.object(time, "time_ns", return_value=1_700_000_000_000_000_000):
        made = [ids.new_id() for _ in range(1000)]
    assert made == sorted(made)
    assert len(set(made)) == len(made)


def test_new_id__increasing_when_the_clock_steps_back() -> None:
    first = ids.new_id()
    with mock.patch.object(time, "time_ns", return_value=0):
        later = ids.new_id()
    assert later > first
    assert uuid.UUID(later).version == 7


def test_uuid7__counter_overflow_borrows_the_next_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ids, "_last", (5_000, (1 << ids._RAND_BITS) - 1))
    with mock.patch.object(time, "time_ns", return_value=5_000 * 1_000_000):
        value = ids.uuid7()
    assert value.int >> 80 == 5_001
    assert value.version == 7


def test_new_id__is_the_canonical_text_of_a_version_7_uuid() -> None:
    made = [ids.new_id() for _ in range(3 * ids._BATCH)]  # spans refills of the random pool
    assert all(str(uuid.UUID(m)) == m and uuid.UUID(m).version == 7 for m in made)
    assert len(set(made)) == len(made)


def test_uuid7__a_forked_child_draws_fresh_random_bits() -> None:
    import os

    ids.new_id()  # the pool now holds unread bytes
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: its next id must not come from the parent's pool
        os.close(read)
        os.write(write, b"1" if ids._offset == 0 and ids._pool == b"" else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    os.close(read)


def test_new_ids__a_batch_interleaves_in_order_with_single_ids() -> None:
    first = ids.new_id()
    batch = ids.new_ids(500)
    last = ids.new_id()
    made = [first, *batch, last]
    assert made == sorted(made)
    assert len(set(made)) == len(made)
    assert all(str(uuid.UUID(m)) == m and uuid.UUID(m).version == 7 for m in batch)
    assert ids.new_ids(0) == []


def test_new_ids__overflow_within_a_batch_borrows_the_next_millisecond(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(ids, "_last", (5_000, (1 << ids._RAND_BITS) - 2))
    with mock.patch.object(time, "time_ns", return_value=5_000 * 1_000_000):
        made = [uuid.UUID(m) for m in ids.new_ids(3)]
    assert [m.int >> 80 for m in made] == [5_000, 5_001, 5_001]
    assert made == sorted(made)
