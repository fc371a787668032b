"""Approvals (`ripple_approvals`) and the key their links are signed with
(`ripple_approval_keys`). SQL private to this module."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from ripple.workflows.store.rows import Executor

__all__ = [
    "ApprovalRow",
    "approval_key",
    "decide_approval",
    "insert_approval",
    "list_approvals",
    "lock_approval",
]

_COLUMNS: Final = (
    "run_id, step, a.workflow, details, approvers, expires_at, a.created_at, decided_at, "
    "approved, decided_by, comment, (expires_at IS NOT NULL AND expires_at <= now()) AS expired"
)

# $1 run_id, $2 step, $3 workflow, $4 details, $5 approvers text[], $6 expires_at
_INSERT: Final = """
INSERT INTO ripple_approvals (run_id, step, workflow, details, approvers, expires_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (run_id, step) DO NOTHING
"""

# $1 run_id, $2 step: the approval, locked until the deciding transaction ends.
_LOCK: Final = f"""
SELECT {_COLUMNS} FROM ripple_approvals a WHERE run_id = $1 AND step = $2 FOR UPDATE
"""  # noqa: S608

# $1 run_id, $2 step, $3 approved, $4 by, $5 comment: returns when it was decided.
_DECIDE: Final = """
UPDATE ripple_approvals
SET decided_at = now(), approved = $3, decided_by = $4, comment = $5
WHERE run_id = $1 AND step = $2 AND decided_at IS NULL
RETURNING decided_at
"""

# Pending (undecided, unexpired, run still active) approvals, oldest first, or every approval
# (of one run, or one approval), with whether its run is still active.
# $1 pending only bool, $2 run_id (NULL: any), $3 limit, $4 step (NULL: any)
_LIST: Final = f"""
SELECT {_COLUMNS}, r.status IN ('pending', 'running', 'sleeping', 'waiting') AS run_active
FROM ripple_approvals a JOIN ripple_runs r USING (run_id)
WHERE ($2::text IS NULL OR a.run_id = $2)
  AND ($4::text IS NULL OR a.step = $4)
  AND (NOT $1 OR (a.decided_at IS NULL AND (a.expires_at IS NULL OR a.expires_at > now())
                  AND r.status IN ('pending', 'running', 'sleeping', 'waiting')))
ORDER BY a.created_at, a.run_id, a.step
LIMIT $3
"""  # noqa: S608

# $1 a fresh random secret: kept only if no key exists yet.
_KEY: Final = """
WITH made AS (
    INSERT INTO ripple_approval_keys (singleton, secret) VALUES (true, $1)
    ON CONFLICT (singleton) DO NOTHING
    RETURNING secret
)
SELECT secret FROM made UNION ALL SELECT secret FROM ripple_approval_keys
LIMIT 1
"""


@dataclass(frozen=True, slots=True)
class ApprovalRow:
    """One approval of one run."""

    run_id: str
    step: str
    workflow: str
    details: Any
    approvers: list[str] | None
    expires_at: datetime | None
    created_at: datetime
    decided_at: datetime | None
    approved: bool | None
    decided_by: str | None
    comment: str | None
    expired: bool
    #: Whether the run is still active (None when not read).
    run_active: bool | None = None

    @classmethod
    def from_row(cls, row: Any) -> ApprovalRow:
        return cls(
            run_id=row["run_id"],
            step=row["step"],
            workflow=row["workflow"],
            details=row["details"],
            approvers=list(row["approvers"]) if row["approvers"] is not None else None,
            expires_at=row["expires_at"],
            created_at=row["created_at"],
            decided_at=row["decided_at"],
            approved=row["approved"],
            decided_by=row["decided_by"],
            comment=row["comment"],
            expired=row["expired"],
            run_active=row.get("run_active"),
        )


async def insert_approval(
    conn: Executor,
    *,
    run_id: str,
    step: str,
    workflow: str,
    details: Any,
    approvers: Sequence[str] | None,
    expires_at: datetime | None,
) -> None:
    """Record a pending approval (with its wait, in the caller's transaction)."""
    names = list(approvers) if approvers is not None else None
    await conn.execute(_INSERT, run_id, step, workflow, details, names, expires_at)


async def lock_approval(conn: Executor, *, run_id: str, step: str) -> ApprovalRow | None:
    """The approval, locked to decide it; None if there is none."""
    row = await conn.fetchrow(_LOCK, run_id, step)
    return None if row is None else ApprovalRow.from_row(row)


async def decide_approval(
    conn: Executor, *, run_id: str, step: str, approved: bool, by: str | None, comment: str | None
) -> datetime | None:
    """Record the decision; when it was made, or None if it was decided already."""
    at: datetime | None = await conn.fetchval(_DECIDE, run_id, step, approved, by, comment)
    return at


async def list_approvals(
    conn: Executor, *, pending: bool, run_id: str | None, limit: int, step: str | None = None
) -> list[ApprovalRow]:
    """Approvals oldest first: the pending ones, or all (of one run, or its `step`)."""
    rows = await conn.fetch(_LIST, pending, run_id, limit, step)
    return [ApprovalRow.from_row(row) for row in rows]


async def approval_key(conn: Executor) -> bytes:
    """The signing key of approval links, made by the first caller."""
    secret: bytes = await conn.fetchval(_KEY, os.urandom(32))
    return secret
