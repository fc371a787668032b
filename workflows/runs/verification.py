"""What `verify` reports, the recorded runs it replays, and the export format of those runs.

A `RecordedRun` is a run's identity, status, input and journal: everything a replay needs.
`ripple runs export` writes them as JSON (`dump_runs`), `ripple.testing.replay` reads them back
(`load_runs`). Pure: no I/O.

The export format, version 1 (one JSON object)::

    {"format": "ripple.runs", "version": 1, "exportedAt": "<ISO 8601>",
     "runs": [{"runId", "workflow", "version", "status", "attempt", "input", "createdAt",
               "journal": [{"key", "seq", "kind", "status", "attempts", "output", "error",
                            "due_at", "started_at", "completed_at"}, ...]}, ...]}

Readers refuse another `format` or a newer `version`; fields may be added within a version.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ripple.platform.errors import InvalidInput
from ripple.workflows.journal import Entry
from ripple.workflows.runs.records import ACTIVE

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "Divergence",
    "RecordedRun",
    "VerifyReport",
    "dump_runs",
    "load_runs",
]

EXPORT_FORMAT = "ripple.runs"
EXPORT_VERSION = 1


@dataclass(frozen=True, slots=True)
class RecordedRun:
    """A run as `verify` replays it: identity, status, input and committed journal."""

    run_id: str
    workflow: str
    version: int
    status: str
    input: Any
    journal: list[Entry]
    attempt: int = 1
    created_at: datetime | None = None

    @property
    def active(self) -> bool:
        return self.status in ACTIVE


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first place a run's journal and the code disagree.

    `position` is the journal position (`seq`) of the call; `expected` is what the journal
    has there (kind and key, or "end of run"), `actual` what the code asked for.
    """

    run_id: str
    workflow: str
    version: int
    status: str
    position: int
    expected: str
    actual: str

    @property
    def active(self) -> bool:
        """Whether the run is still active: it would fail once the new code resumes it."""
        return self.status in ACTIVE

    def to_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "workflow": self.workflow,
            "version": self.version,
            "status": self.status,
            "position": self.position,
            "expected": self.expected,
            "actual": self.actual,
        }

    def __str__(self) -> str:
        return (
            f"run {self.run_id} ({self.workflow} v{self.version}, {self.status}) at position "
            f"{self.position}: the journal has {self.expected}, the code asks for {self.actual}"
        )


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The outcome of replaying recorded runs against code: `ok` when no active run
    diverges (divergences of completed or failed runs are warnings)."""

    runs_checked: int
    divergences: list[Divergence] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(d.active for d in self.divergences)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "runsChecked": self.runs_checked,
            "divergences": [d.to_json() for d in self.divergences],
        }

    def __str__(self) -> str:
        lines = [f"{self.runs_checked} run(s) checked, {len(self.divergences)} divergence(s)"]
        lines += [f"  {d}" for d in self.divergences]
        return "\n".join(lines)


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _when(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def dump_runs(runs: Iterable[RecordedRun], *, exported_at: datetime | None = None) -> str:
    """The export document of `runs` (format `ripple.runs`, version 1)."""
    doc = {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "exportedAt": _iso(exported_at or datetime.now(UTC)),
        "runs": [
            {
                "runId": run.run_id,
                "workflow": run.workflow,
                "version": run.version,
                "status": run.status,
                "attempt": run.attempt,
                "input": run.input,
                "createdAt": _iso(run.created_at),
                "journal": [e.to_json() for e in sorted(run.journal, key=lambda e: e.seq)],
            }
            for run in runs
        ],
    }
    return json.dumps(doc, indent=1)


def load_runs(text: str) -> list[RecordedRun]:
    """The runs of an export document; raises InvalidInput for another format or version."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise InvalidInput(
            f"not a runs export (invalid JSON: {exc}): use `ripple runs export`"
        ) from None
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise InvalidInput(f'not a runs export: expected "format": {EXPORT_FORMAT!r}')
    version = doc.get("version")
    if not isinstance(version, int) or version > EXPORT_VERSION:
        raise InvalidInput(
            f"runs export version {version!r} is newer than this Ripple reads "
            f"({EXPORT_VERSION}): upgrade Ripple or export again with this version"
        )
    try:
        return [
            RecordedRun(
                run_id=run["runId"],
                workflow=run["workflow"],
                version=run["version"],
                status=run["status"],
                input=run.get("input"),
                attempt=run.get("attempt", 1),
                created_at=_when(run.get("createdAt")),
                journal=[Entry.from_json(e) for e in run["journal"]],
            )
            for run in doc["runs"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidInput(f"malformed runs export ({exc!r}): export the runs again") from None
