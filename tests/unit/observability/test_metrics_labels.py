"""Metric label helpers keep label cardinality bounded."""

from __future__ import annotations

import pytest

from ripple.platform.ops import metrics


@pytest.mark.parametrize(
    ("key", "label"),
    [("send", "send"), ("send:1", "send"), ("send:42", "send"), ("a:b", "a:b"), ("x:1:2", "x:1")],
)
def test_step_label__auto_indexed_keys_collapse(key: str, label: str) -> None:
    assert metrics.step_label(key) == label


@pytest.mark.parametrize(
    ("topic", "prefix"), [("user", "user"), ("user.signup", "user"), ("a.b.c", "a")]
)
def test_topic_prefix__first_segment(topic: str, prefix: str) -> None:
    assert metrics.topic_prefix(topic) == prefix
