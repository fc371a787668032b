"""Pure parts: key indexing, retry maths, serde, definitions, errors."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import timedelta

import pytest
from pydantic import BaseModel

from ripple.platform.errors import InvalidInput
from ripple.workflows import (
    NonDeterminismError,
    RetryAfterError,
    RetryPolicy,
    WorkflowContext,
    WorkflowFailed,
    serde,
    workflow,
)
from ripple.workflows.journal import Entry, Journal, indexed_key


def test_journal__duplicate_names_are_auto_indexed() -> None:
    journal = Journal("r")
    keys = [journal.allocate(name, "run")[0] for name in ["a", "b", "a", "a", "b"]]
    assert keys == ["a", "b", "a:1", "a:2", "b:1"]
    assert indexed_key("x", 0) == "x"
    assert indexed_key("x", 3) == "x:3"


def test_journal__kind_mismatch_is_non_determinism() -> None:
    journal = Journal("r", [Entry("a", 0, "sleep", "completed")])
    with pytest.raises(NonDeterminismError) as info:
        journal.allocate("a", "run")
    assert (info.value.step_key, info.value.expected_kind, info.value.recorded_kind) == (
        "a",
        "run",
        "sleep",
    )
    assert isinstance(info.value, WorkflowFailed)


def test_journal__position_mismatch_is_non_determinism() -> None:
    journal = Journal("r", [Entry("a", 0, "run", "completed"), Entry("b", 1, "run", "done")])
    with pytest.raises(NonDeterminismError):
        journal.allocate("b", "run")


def test_retry__backoff_grows_caps_and_jitters() -> None:
    policy = RetryPolicy(initial_interval=1, backoff_coefficient=2, max_interval=5, jitter=0)
    assert [policy.delay(n) for n in range(1, 6)] == [1, 2, 4, 5, 5]
    jittered = RetryPolicy(initial_interval=10, jitter=0.2)
    rng = random.Random(1)
    assert all(8 <= jittered.delay(1, rng) <= 12 for _ in range(100))
    assert RetryPolicy(max_attempts=0).allows(10_000)
    assert not RetryPolicy(max_attempts=2).allows(3)
    assert not RetryPolicy(non_retryable=[KeyError]).is_retryable(KeyError("x"))
    assert RetryPolicy(non_retryable=["KeyError"]).is_retryable(ValueError("x"))
    assert RetryAfterError("later", timedelta(seconds=3)).delay == 3.0


class Model(BaseModel):
    a: int
    b: list[str] = []


@dataclass
class Point:
    x: int
    y: int


def returns_point() -> Point:
    return Point(1, 2)


def test_serde__round_trips_models_dataclasses_and_json() -> None:
    assert serde.dump(Model(a=1, b=["x"])) == {"a": 1, "b": ["x"]}
    assert serde.load({"a": 2}, Model) == Model(a=2)
    assert serde.dump(Point(1, 2)) == {"x": 1, "y": 2}
    assert serde.load({"x": 1, "y": 2}, serde.return_annotation(returns_point)) == Point(1, 2)
    assert serde.load({"raw": [1]}) == {"raw": [1]}
    assert serde.validate({"a": "3"}, Model) == {"a": 3, "b": []}
    error = serde.error_json(ValueError("boom"))
    assert error["type"] == "ValueError"
    assert error["message"] == "boom"
    assert "ValueError" in error["traceback"]


def test_definition__names_versions_and_types() -> None:
    @workflow(name="ok-name_1", version=3)
    async def defined(ctx: WorkflowContext, inp: Model) -> Point:
        return Point(1, 1)

    assert (defined.name, defined.version) == ("ok-name_1", 3)
    assert defined.input_type is Model
    assert defined.output_type is Point

    @workflow
    async def plain(ctx: WorkflowContext) -> None:
        return None

    assert plain.name == "plain"
    assert not plain.takes_input
    with pytest.raises(InvalidInput):

        @workflow(name="Bad Name")
        async def bad(ctx: WorkflowContext) -> None:
            return None

    with pytest.raises(TypeError):

        @workflow(name="sync")  # type: ignore[arg-type]
        def not_async(ctx: WorkflowContext) -> None:
            return None
