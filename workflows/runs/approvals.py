"""`Approvals`: the pending approvals of runs and deciding one from its link. A decision is
one transaction: the approval row (single use), the run's approval wait resolved through the
signal inbox machinery, and the `approval.decide` audit row; the run wakes after commit."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ripple.platform.access import audit_store
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Pool, map_errors, transaction
from ripple.platform.core.wake import NullWaker, RunReady
from ripple.platform.errors import Conflict, Gone, InvalidInput, NotFound
from ripple.workflows.authoring.approvals import (
    APPROVAL_PREFIX,
    Approval,
    approval_url,
    verify_token,
)
from ripple.workflows.runs.records import TERMINAL
from ripple.workflows.store import approvals as store
from ripple.workflows.store import lock_run, signal_run

__all__ = ["Approvals", "PendingApproval"]

MAX_COMMENT = 2000


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """An approval of a run: its link and what it asks; `decided_at` is None while pending."""

    run_id: str
    step: str
    url: str
    expires_at: datetime | None
    details: Any
    workflow: str
    approvers: list[str] | None
    created_at: datetime
    decided_at: datetime | None = None
    approved: bool | None = None
    by: str | None = None
    comment: str | None = None
    expired: bool = False
    #: False once the run ended (canceled, failed) without a decision: the approval is closed.
    run_active: bool = True

    @property
    def token(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    @property
    def state(self) -> str:
        """pending, approved, rejected, expired or closed (its run ended undecided)."""
        if self.decided_at is not None:
            return "approved" if self.approved else "rejected"
        if self.expired:
            return "expired"
        return "pending" if self.run_active else "closed"


class Approvals:
    """List approvals and decide them (`client.approvals`)."""

    def __init__(self, pool: Pool, waker: NullWaker, settings: Settings) -> None:
        self.pool = pool
        self.waker = waker
        self.settings = settings
        self._key: bytes | None = None

    async def key(self) -> bytes:
        """The signing key of approval links (shared by every process through Postgres)."""
        if self._key is None:
            with map_errors():
                self._key = await store.approval_key(self.pool)
        return self._key

    def url(self, key: bytes, run_id: str, step: str) -> str:
        return approval_url(self.settings.public_url, key, run_id, step)

    async def list(
        self, pending: bool = True, *, run_id: str | None = None, limit: int = 100
    ) -> list[PendingApproval]:
        """Approvals oldest first: the pending ones (undecided, not expired), or with
        `pending=False` all of them, optionally of one run."""
        if not 1 <= limit <= self.settings.max_page_size:
            raise InvalidInput(f"limit must be 1-{self.settings.max_page_size}", field="limit")
        key = await self.key()
        with map_errors():
            rows = await store.list_approvals(
                self.pool, pending=pending, run_id=run_id, limit=limit
            )
        return [self._approval(key, r) for r in rows]

    async def get(self, url_or_token: str) -> PendingApproval:
        """The approval a link names (any state); NotFound for a forged or altered one."""
        run_id, step = await self._verify(url_or_token)
        with map_errors():
            rows = await store.list_approvals(
                self.pool, pending=False, run_id=run_id, step=step, limit=1
            )
        if not rows:
            raise NotFound("no such approval: check the link")
        return self._approval(await self.key(), rows[0])

    def _approval(self, key: bytes, r: store.ApprovalRow) -> PendingApproval:
        return PendingApproval(
            run_id=r.run_id,
            step=r.step,
            url=self.url(key, r.run_id, r.step),
            expires_at=r.expires_at,
            details=r.details,
            workflow=r.workflow,
            approvers=r.approvers,
            created_at=r.created_at,
            decided_at=r.decided_at,
            approved=r.approved,
            by=r.decided_by,
            comment=r.comment,
            expired=r.expired,
            run_active=r.run_active is not False,
        )

    async def _verify(self, url_or_token: str) -> tuple[str, str]:
        token = str(url_or_token).rstrip("/").rsplit("/", 1)[-1]
        named = verify_token(await self.key(), token)
        if named is None:
            raise NotFound("no such approval: check the link")
        return named

    async def decide(
        self,
        url_or_token: str,
        approved: bool = True,
        *,
        by: str | None = None,
        comment: str | None = None,
    ) -> Approval:
        """Approve or reject through a link or its token; the waiting run resumes with the
        decision. NotFound: forged or altered link; Conflict: decided already; Gone: expired
        (or its run ended); InvalidInput: `by` is not one of the approval's approvers."""
        if not isinstance(approved, bool):
            raise InvalidInput("approved must be true or false", field="approved")
        for value, name in ((by, "by"), (comment, "comment")):
            if value is not None and (not isinstance(value, str) or "\x00" in value):
                raise InvalidInput(f"{name} must be text without NUL", field=name)
        if comment is not None and len(comment) > MAX_COMMENT:
            raise InvalidInput(f"comment is longer than {MAX_COMMENT} characters", field="comment")
        if by is not None and len(by) > 200:
            raise InvalidInput("by is longer than 200 characters", field="by")
        run_id, step = await self._verify(url_or_token)
        with map_errors():
            decision = await self._decide(run_id, step, approved, by, comment)
        self.waker.notify(RunReady())
        return decision

    async def _decide(
        self, run_id: str, step: str, approved: bool, by: str | None, comment: str | None
    ) -> Approval:
        async with transaction(self.pool) as conn:
            row = await store.lock_approval(conn, run_id=run_id, step=step)
            if row is None:
                raise NotFound("no such approval: check the link")
            if row.decided_at is not None:
                verdict = "approved" if row.approved else "rejected"
                raise Conflict(f"approval {step!r} of run {run_id} was already {verdict}")
            if row.expired:
                raise Gone(f"approval {step!r} of run {run_id} expired at {row.expires_at}")
            if row.approvers is not None and by not in row.approvers:
                raise InvalidInput(
                    f"approval {step!r} may be decided by {', '.join(row.approvers)} only: "
                    "pass one of them as by",
                    field="by",
                )
            status = await lock_run(conn, run_id=run_id)
            if status is None or status in TERMINAL:
                raise Gone(f"run {run_id} has ended ({status}); its approval is closed")
            at = await store.decide_approval(
                conn, run_id=run_id, step=step, approved=approved, by=by, comment=comment
            )
            assert at is not None  # the row is locked and was undecided
            payload = {"approved": approved, "by": by, "comment": comment, "at": at.isoformat()}
            if not await signal_run(
                conn, run_id=run_id, name=APPROVAL_PREFIX + step, payload=payload
            ):
                # The wait timed out in the meantime (the worker's clock): the run moved on.
                raise Gone(f"approval {step!r} of run {run_id} expired")
            await audit_store.record(
                conn,
                "approval.decide",
                run_id,
                {"step": step, "approved": approved, "by": by, "comment": comment},
            )
        return Approval(approved, by, comment, at)
