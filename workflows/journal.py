"""A run's journal in memory during one resume: lookup by key, auto-indexed keys, and the
non-determinism check (same key at the same call position, same kind). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from ripple.workflows.errors import NonDeterminismError

__all__ = ["SCOPING_KINDS", "Entry", "Journal", "StepStatus", "current_scope", "indexed_key"]


class StepStatus(StrEnum):
    """A journal entry's status (stored as its text in `ripple_steps.status`)."""

    #: Begun and not yet resolved: a sleep, wait, child, race, join or loop in progress.
    PENDING = "pending"
    #: A step body's attempt has started (journaled before the body when it must be durable).
    RUNNING = "running"
    #: An attempt failed and the next one is due at `due_at`.
    RETRYING = "retrying"
    COMPLETED = "completed"
    FAILED = "failed"


#: Statuses a journal entry never leaves.
FINISHED: frozenset[str] = frozenset({StepStatus.COMPLETED, StepStatus.FAILED})

#: The key prefix of the steps called in the current task: "" at a run's top level,
#: "race/branch/" inside a race or join branch, "loop/~i/" inside a loop iteration.
current_scope: ContextVar[str] = ContextVar("ripple_step_scope", default="")


def indexed_key(name: str, index: int) -> str:
    """The key of the `index`-th call (0-based) named `name` in one pass: `name`, `name:1`, ..."""
    return name if index == 0 else f"{name}:{index}"


@dataclass(slots=True)
class Entry:
    """One journal entry (mutable in memory; written through the run's writer)."""

    key: str
    seq: int
    kind: str
    status: str
    attempts: int = 0
    output: Any = None
    error: dict[str, Any] | None = None
    due_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None

    @classmethod
    def begun(
        cls,
        key: str,
        seq: int,
        kind: str,
        at: datetime,
        *,
        output: Any = None,
        due_at: datetime | None = None,
    ) -> Entry:
        """A sleep, wait, child, race, join or loop that began at `at` (pending)."""
        return cls(key, seq, kind, StepStatus.PENDING, 1, output, None, due_at, at)

    @classmethod
    def attempt(cls, key: str, seq: int, kind: str, attempt: int, at: datetime) -> Entry:
        """Attempt number `attempt` of a step body, started at `at` (running)."""
        return cls(key, seq, kind, StepStatus.RUNNING, attempt, started_at=at)

    @classmethod
    def recorded(cls, key: str, seq: int, kind: str, value: Any, at: datetime) -> Entry:
        """A value recorded at once (`ctx.now()`, `uuid()`, `random()`, a patch marker)."""
        return cls(key, seq, kind, StepStatus.COMPLETED, 1, value, None, None, at, at)

    def completed(self, output: Any, at: datetime | None, *, attempts: int = 1) -> Entry:
        """This entry, resolved with `output` at `at`."""
        return replace(
            self,
            status=StepStatus.COMPLETED,
            attempts=attempts,
            output=output,
            error=None,
            completed_at=at,
        )

    def failed(
        self,
        error: dict[str, Any] | None,
        at: datetime | None,
        *,
        attempts: int = 1,
        output: Any = None,
    ) -> Entry:
        """This entry, failed with `error` at `at` (`output` may keep what a report needs,
        such as a child's run id)."""
        return replace(
            self,
            status=StepStatus.FAILED,
            attempts=attempts,
            output=output,
            error=error,
            completed_at=at,
        )

    def retrying(self, attempt: int, error: dict[str, Any], due_at: datetime) -> Entry:
        """This step after attempt `attempt` failed with `error`, the next due at `due_at`."""
        return replace(
            self,
            status=StepStatus.RETRYING,
            attempts=attempt,
            output=None,
            error=error,
            due_at=due_at,
            started_at=None,
            completed_at=None,
        )

    @classmethod
    def from_row(cls, row: Any) -> Entry:
        return cls(
            key=row.key if hasattr(row, "key") else row["key"],
            seq=_get(row, "seq"),
            kind=_get(row, "kind"),
            status=_get(row, "status"),
            attempts=_get(row, "attempts"),
            output=_get(row, "output"),
            error=_get(row, "error"),
            due_at=_get(row, "due_at"),
        )

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Entry:
        """The entry `to_json` gave (a missing optional field as its default); KeyError,
        TypeError or ValueError for a malformed one."""
        return cls(
            key=doc["key"],
            seq=doc["seq"],
            kind=doc["kind"],
            status=doc["status"],
            attempts=doc.get("attempts", 0),
            output=doc.get("output"),
            error=doc.get("error"),
            due_at=_when(doc.get("due_at")),
            started_at=_when(doc.get("started_at")),
            completed_at=_when(doc.get("completed_at")),
        )

    def to_json(self) -> dict[str, Any]:
        """The form the journal writes of `store` read (timestamps as ISO text)."""
        return {
            "key": self.key,
            "seq": self.seq,
            "kind": self.kind,
            "status": self.status,
            "attempts": self.attempts,
            "output": self.output,
            "error": self.error,
            "due_at": _iso(self.due_at),
            "started_at": _iso(self.started_at),
            "completed_at": _iso(self.completed_at),
        }

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


def _get(row: Any, name: str) -> Any:
    return getattr(row, name) if hasattr(row, name) else row[name]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


#: Journal kinds whose entries scope the steps called inside them (`race/branch/step`,
#: `loop/~i/step`).
SCOPING_KINDS = frozenset({"race", "join", "loop"})


class Journal:
    """The entries of one run plus the allocation state of the current replay pass.

    Keys: the n-th call named `name` in one pass is `name`, `name:1`, ...; a call inside a race
    or join branch or a loop iteration is keyed under its scope (`scope/name`). The order check
    (same key at the same position) applies to the run's top level, where calls happen one
    after another or started together; inside a scope, branches interleave by timing, so only
    the key's kind is checked there.
    """

    def __init__(self, run_id: str, entries: Iterable[Entry] = ()) -> None:
        self.run_id = run_id
        self.by_key: dict[str, Entry] = {}
        self.by_seq: dict[int, Entry] = {}
        for entry in entries:
            self.by_key[entry.key] = entry
            self.by_seq[entry.seq] = entry
        scopes = tuple(e.key + "/" for e in self.by_key.values() if e.kind in SCOPING_KINDS)
        top = [e for e in self.by_key.values() if not scopes or not e.key.startswith(scopes)]
        #: Recorded top-level entries by position among the top level.
        self.top: list[Entry] = sorted(top, key=lambda e: e.seq)
        self._counts: dict[str, int] = {}
        #: A new entry's position in the run's history: after everything recorded, so the
        #: top level stays in call order across resumes (a replay may allocate fewer calls
        #: than the pass that recorded them: a finished race does not run its branches again).
        self._seq = max(self.by_seq, default=-1) + 1
        self._top_pos = 0

    def allocate(self, name: str, kind: str, scope: str = "") -> tuple[str, int, Entry | None]:
        """Key and position of the next call named `name` (in `scope`), and its recorded entry
        if any.

        Raises NonDeterminismError when the journal recorded a different step at this position
        of the top level, or a different kind under this key.
        """
        full = scope + name
        index = self._counts.get(full, 0)
        self._counts[full] = index + 1
        key = scope + indexed_key(name, index)
        if not scope:
            position = self._top_pos
            self._top_pos += 1
            if position < len(self.top) and self.top[position].key != key:
                at_position = self.top[position]
                raise NonDeterminismError(
                    self.run_id, key, kind, f"{at_position.kind} step {at_position.key!r}"
                )
        entry = self.by_key.get(key)
        if entry is not None and entry.kind != kind:
            raise NonDeterminismError(self.run_id, key, kind, entry.kind)
        if entry is not None:
            return key, entry.seq, entry
        seq = self._seq
        self._seq += 1
        return key, seq, entry

    def skip(self, name: str) -> bool:
        """`removed(name)`: if the run recorded the next top-level call `name` here, step past
        it (True); new runs never recorded it, and nothing is consumed (False)."""
        index = self._counts.get(name, 0)
        key = indexed_key(name, index)
        position = self._top_pos
        if position < len(self.top) and self.top[position].key == key:
            self._counts[name] = index + 1
            self._top_pos += 1
            return True
        return False

    @property
    def top_position(self) -> int:
        """Position of the next top-level call in this pass."""
        return self._top_pos

    def passed(self) -> bool:
        """Whether the journal already recorded a top-level call at the current position (the
        run went past this point before, on the code it ran then)."""
        return self._top_pos < len(self.top)

    def put(self, entry: Entry) -> None:
        self.by_key[entry.key] = entry
        self.by_seq[entry.seq] = entry

    def forget(self, prefix: str) -> None:
        """Drop the entries under `prefix` (a trimmed loop iteration) from memory."""
        for key in [k for k in self.by_key if k.startswith(prefix)]:
            entry = self.by_key.pop(key)
            if self.by_seq.get(entry.seq) is entry:
                del self.by_seq[entry.seq]
