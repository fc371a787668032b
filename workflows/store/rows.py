"""Row types shared by the workflow store's modules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

from ripple.platform.core.db import Connection, Pool

__all__ = ["CanceledRun", "Executor", "command_count"]

#: Where a statement runs: a connection (the caller's transaction) or the pool (it commits
#: alone).
Executor: TypeAlias = "Connection | Pool"


@dataclass(frozen=True, slots=True)
class CanceledRun:
    """A run a cancel ended: what settling its parent and the metrics need."""

    run_id: str
    workflow: str
    parent_run_id: str | None
    parent_step_key: str | None
    parent_step_seq: int | None
    error: dict[str, Any] | None

    @classmethod
    def from_row(cls, row: Any) -> CanceledRun:
        return cls(
            run_id=row["run_id"],
            workflow=row["workflow"],
            parent_run_id=row["parent_run_id"],
            parent_step_key=row["parent_step_key"],
            parent_step_seq=row["parent_step_seq"],
            error=row["error"],
        )


def command_count(status: str) -> int:
    """Rows affected, from a command tag such as `INSERT 0 5` or `DELETE 500`."""
    return int(status.rsplit(" ", 1)[-1])
