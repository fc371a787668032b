"""The engine's ports: what it knows of the claim it executes (`RunFacts`), the durable writes
it asks for (`RunWriter`, with the `WaitSpec`/`ChildSpec` it hands over) and how an execution
ended (`Outcome`). Declarations, and the step results both writers compute alike: the Postgres
writer (`writer.py`) and the in-memory one (`memory.py`) implement them, and nothing here does
I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from ripple.workflows.journal import Entry

__all__ = [
    "ChildSpec",
    "Outcome",
    "RunFacts",
    "RunWriter",
    "WaitSpec",
    "child_timeout_error",
    "existing_child_entry",
]


class RunFacts(Protocol):
    """What the engine needs to know about the claim it executes."""

    @property
    def run_id(self) -> str: ...
    @property
    def workflow(self) -> str: ...
    @property
    def version(self) -> int: ...
    @property
    def input(self) -> Any: ...
    @property
    def attempt(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def deadline(self) -> datetime | None: ...
    @property
    def trace(self) -> dict[str, str] | None: ...
    @property
    def step_count(self) -> int: ...
    @property
    def recovered(self) -> bool: ...
    @property
    def recoveries(self) -> int: ...
    @property
    def db_now(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class WaitSpec:
    """A new durable wait."""

    entry: Entry
    name: str
    event: str | None
    match: dict[str, Any] | None
    #: For an approval: {step, details, approvers}, stored with the wait.
    approval: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """A child run to create idempotently, under `key`: `{parent_run_id}:{step_key}`, and
    `...:attempt-{n}` from the parent's second attempt on (a retry starts a fresh child for
    a child step that did not complete)."""

    entry: Entry
    run_id: str
    workflow: str
    version: int | None
    input: Any
    key: str


def existing_child_entry(
    entry: Entry, run_id: str, status: str, output: Any, error: dict[str, Any] | None
) -> Entry:
    """The child step `entry` pointing at the child run that already existed under its key (its
    entry was lost with an earlier attempt), with its result if it ended, since nothing else
    would ever report it."""
    found = {"runId": run_id}
    entry = replace(entry, attempts=1, output=found, error=None)
    if status == "completed":
        return entry.completed(output, None)
    if status in ("failed", "canceled"):
        return entry.failed(error, None, output=found)
    return entry


def child_timeout_error(run_id: str, key: str) -> dict[str, Any]:
    """The error of child step `key` of run `run_id` whose `timeout` passed first."""
    return {
        "type": "StepTimeout",
        "message": f"step {key!r} of run {run_id} timed out waiting for its child run "
        "(the child keeps running)",
    }


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an execution ended: a terminal or suspended status, and when it is due again."""

    status: str
    wake_at: datetime | None = None


class RunWriter(Protocol):
    """Durable, fenced writes of one claimed run; each call is one transaction that first
    commits `entries` (batched journal writes). Raise `LeaseLost` when fenced out."""

    async def flush(
        self,
        entries: list[Entry],
        step_count: int,
        trim: Sequence[str] = (),
        *,
        renew: bool = False,
    ) -> None:
        """Commit `entries`, and delete the journal entries under the `trim` key prefixes.
        With `renew`, also extend the run's lease (else the heartbeat does)."""
        ...

    async def settle_race(
        self, entries: list[Entry], step_count: int, losers: Sequence[str]
    ) -> list[str]:
        """Commit `entries` (the race's outcome among them), drop the waits of the losing
        branches (key prefixes) and cancel the child runs they started."""
        ...

    async def register_wait(
        self, entries: list[Entry], step_count: int, wait: WaitSpec
    ) -> tuple[bool, Any]: ...

    async def check_match(self, event: str, match: dict[str, Any]) -> None:
        """Raise `InvalidInput` when `match` names a property `event`'s topic schema does not
        declare (before a new wait is journaled). Writes nothing."""
        ...

    async def start_child(self, entries: list[Entry], step_count: int, child: ChildSpec) -> Entry:
        """Create the child and journal the step; returns the step's entry (pending on the
        child, or its result if the child existed and ended)."""
        ...

    async def time_out(
        self, entries: list[Entry], step_count: int, entry: Entry, is_wait: bool
    ) -> Entry: ...

    async def suspend(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        wake_at: datetime,
        blocking_keys: list[str],
    ) -> datetime:
        """Park the run; returns when it is available again (now if a wait already resolved)."""
        ...

    async def finish(
        self,
        entries: list[Entry],
        step_count: int,
        status: str,
        output: Any,
        error: dict[str, Any] | None,
    ) -> None: ...

    async def retry_run(
        self, entries: list[Entry], step_count: int, delay: float, error: dict[str, Any]
    ) -> None: ...
