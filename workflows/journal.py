"""A run's journal in memory during one resume: lookup by key, auto-indexed keys, and the
non-determinism check (same key at the same call position, same kind). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ripple.workflows.errors import NonDeterminismError

__all__ = ["Entry", "Journal", "indexed_key"]


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

    def to_json(self) -> dict[str, Any]:
        """The form `UPSERT_STEPS` reads (timestamps as ISO text)."""
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
        return self.status in ("completed", "failed")


def _get(row: Any, name: str) -> Any:
    return getattr(row, name) if hasattr(row, name) else row[name]


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


class Journal:
    """The entries of one run plus the allocation state of the current replay pass."""

    def __init__(self, run_id: str, entries: Iterable[Entry] = ()) -> None:
        self.run_id = run_id
        self.by_key: dict[str, Entry] = {}
        self.by_seq: dict[int, Entry] = {}
        for entry in entries:
            self.by_key[entry.key] = entry
            self.by_seq[entry.seq] = entry
        self._counts: dict[str, int] = {}
        self._seq = 0

    def allocate(self, name: str, kind: str) -> tuple[str, int, Entry | None]:
        """Key and position of the next call named `name`, and its recorded entry if any.

        Raises NonDeterminismError when the journal recorded a different step at this position
        or a different kind under this key.
        """
        index = self._counts.get(name, 0)
        self._counts[name] = index + 1
        key = indexed_key(name, index)
        seq = self._seq
        self._seq += 1
        at_position = self.by_seq.get(seq)
        if at_position is not None and at_position.key != key:
            raise NonDeterminismError(
                self.run_id, key, kind, f"{at_position.kind} step {at_position.key!r}"
            )
        entry = self.by_key.get(key)
        if entry is not None and entry.kind != kind:
            raise NonDeterminismError(self.run_id, key, kind, entry.kind)
        return key, seq, entry

    def put(self, entry: Entry) -> None:
        self.by_key[entry.key] = entry
        self.by_seq[entry.seq] = entry
