"""Public records of runs and steps as callers see them (rows mapped by `from_row`); no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Generic, TypeVar

__all__ = ["Page", "Run", "RunStatus", "SignalResult", "StepRecord", "StepStatus"]

T = TypeVar("T")


class RunStatus(StrEnum):
    """Lifecycle of a run; values equal the database text."""

    #: created, not yet claimed by a worker (or released by a stopping worker)
    PENDING = "pending"
    #: a worker holds its lease and executes it
    RUNNING = "running"
    #: suspended on a durable timer (sleep or retry backoff)
    SLEEPING = "sleeping"
    #: suspended on a wait for an event/signal or a child run
    WAITING = "waiting"
    #: finished with an output
    COMPLETED = "completed"
    #: finished with an error
    FAILED = "failed"
    #: canceled by a caller (or its parent's cancel)
    CANCELED = "canceled"


ACTIVE = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.SLEEPING, RunStatus.WAITING)
TERMINAL = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELED)


class StepStatus(StrEnum):
    """State of one journal entry; values equal the database text."""

    #: an attempt started and has not recorded a result
    RUNNING = "running"
    #: an attempt failed; the next one is due at `due_at`
    RETRYING = "retrying"
    #: a timer, wait or child the run is suspended on
    PENDING = "pending"
    #: recorded result
    COMPLETED = "completed"
    #: failed terminally
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Run:
    """A workflow run."""

    run_id: str
    workflow: str
    version: int | None
    status: RunStatus
    input: Any
    output: Any
    error: dict[str, Any] | None
    attempt: int
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    parent_run_id: str | None
    deadline: datetime | None = None
    idempotency_key: str | None = None
    #: claim order among pending runs of the workflow (higher first)
    priority: int = 0
    #: why a pending run is not claimed yet: "concurrency", "throttle" or "debounce" (None:
    #: nothing holds it back)
    blocked_by: str | None = None
    #: The run this one was forked from (`client.fork`), if any.
    forked_from: str | None = None

    @classmethod
    def from_row(cls, row: Any) -> Run:
        return cls(
            run_id=row["run_id"],
            workflow=row["workflow"],
            version=row["version"],
            status=RunStatus(row["status"]),
            input=row["input"],
            output=row["output"],
            error=row["error"],
            attempt=row["attempt"],
            created_at=row["created_at"],
            started_at=row["started_at"],
            completed_at=row["completed_at"],
            parent_run_id=row["parent_run_id"],
            deadline=row["deadline"],
            idempotency_key=row["idempotency_key"],
            priority=row["priority"],
            blocked_by=row["blocked_by"],
            forked_from=row.get("forked_from"),
        )


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One journal entry of a run, with timings."""

    key: str
    kind: str
    status: StepStatus
    attempts: int
    output: Any
    error: dict[str, Any] | None
    started_at: datetime
    completed_at: datetime | None
    seq: int = 0
    due_at: datetime | None = None

    @classmethod
    def from_row(cls, row: Any) -> StepRecord:
        return cls(
            key=row["key"],
            kind=row["kind"],
            status=StepStatus(row["status"]),
            attempts=row["attempts"],
            output=row["output"],
            error=row["error"],
            started_at=row["started_at"],
            completed_at=row["completed_at"],
            seq=row["seq"],
            due_at=row["due_at"],
        )


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a list; pass `next_cursor` to get the next (None: last page)."""

    items: list[T]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class SignalResult:
    """Outcome of `signal()`: resolved a waiting step now, or kept in the run's inbox."""

    delivered: bool
    buffered: bool
