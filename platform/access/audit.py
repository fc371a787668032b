"""`Audit`: the audit trail as `client.audit` (`list`), and its retention for the sweeper.

Rows are written by the audited actions themselves, in their own transactions
(`audit_store.record`); this module only reads and expires them.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ripple.platform.access import audit_store
from ripple.platform.access.audit_store import ACTIONS
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool, map_errors
from ripple.platform.errors import InvalidInput

__all__ = ["ACTIONS", "Audit", "AuditEntry", "AuditPage"]


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audited action: when, who (`actor`: a token's name, `env` or `python`), what, on
    which id, in which HTTP request, and details (a bulk action's filter and count)."""

    at: datetime
    actor: str
    action: str
    target: str | None
    request_id: str | None
    details: dict[str, Any]
    #: The row's id (time-ordered).
    id: str = ""
    #: The stored token's id when a stored token acted.
    token_id: str | None = None


@dataclass(frozen=True, slots=True)
class AuditPage:
    """One page of the audit trail, newest first; pass `next_cursor` for the next (None: last)."""

    items: list[AuditEntry]
    next_cursor: str | None


def _entry(row: audit_store.AuditRow) -> AuditEntry:
    return AuditEntry(
        at=row.at,
        actor=row.actor,
        action=row.action,
        target=row.target,
        request_id=row.request_id,
        details=row.details,
        id=row.id,
        token_id=row.token_id,
    )


class Audit:
    """Reads the audit trail (`client.audit`)."""

    def __init__(self, pool: Pool, settings: Settings) -> None:
        self._pool = pool
        self._settings = settings

    async def list(
        self,
        since: datetime | None = None,
        action: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> AuditPage:
        """Audit entries newest first, at or after `since`, of one `action`; pass the page's
        `next_cursor` as `cursor` for the next page."""
        if since is not None:
            if not isinstance(since, datetime):
                raise InvalidInput("since must be a datetime", field="since")
            since = since.replace(tzinfo=UTC) if since.tzinfo is None else since
        if action is not None and action not in ACTIONS:
            raise InvalidInput(
                f"unknown audit action {action!r}; use one of {', '.join(ACTIONS)}",
                field="action",
            )
        maximum = self._settings.max_page_size
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
            raise InvalidInput(f"limit must be 1-{maximum} (RIPPLE_MAX_PAGE_SIZE)", field="limit")
        before = None
        if cursor is not None:
            try:
                before = str(uuid.UUID(str(cursor)))
            except ValueError:
                raise InvalidInput(
                    "cursor is not one this listing returned: pass a page's next_cursor",
                    field="cursor",
                ) from None
        with map_errors():
            async with self._pool.acquire() as conn:
                rows = await audit_store.list_audit(
                    conn, since=since, action=action, before_id=before, limit=limit + 1
                )
        items = [_entry(row) for row in rows[:limit]]
        next_cursor = items[-1].id if len(rows) > limit else None
        return AuditPage(items, next_cursor)

    async def delete_old_audit(self, conn: Connection, *, retention: float, batch: int) -> int:
        """Delete one batch of entries older than `retention` seconds (the sweeper's port)."""
        return await audit_store.delete_old_audit(conn, retention=retention, batch=batch)
