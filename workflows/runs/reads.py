"""`Reads`: a run, its journal, and run listings (listings read from the replica's pool when
RIPPLE_DATABASE_READ_URL sets one)."""

from __future__ import annotations

from datetime import datetime

from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool, map_errors
from ripple.platform.errors import InvalidInput
from ripple.workflows import store
from ripple.workflows.authoring.definition import check_workflow_name
from ripple.workflows.runs.records import TERMINAL, Page, Run, RunStatus, StepRecord
from ripple.workflows.runs.search_query import parse_where
from ripple.workflows.store import search

__all__ = ["Reads"]


class Reads:
    """Read runs and their steps."""

    def __init__(self, pool: Pool, settings: Settings, *, read_pool: Pool | None = None) -> None:
        self.pool = pool
        #: Where run listings read (a replica's pool with RIPPLE_DATABASE_READ_URL).
        self.read_pool = read_pool or pool
        self.settings = settings

    async def get_run(self, run_id: str) -> Run | None:
        """The run, or None."""
        with map_errors():
            return await store.read_run(self.pool, run_id=run_id)

    async def is_active(self, run_id: str, conn: Connection | None = None) -> bool:
        """Whether the run exists and is pending, running, sleeping or waiting."""
        with map_errors():
            row = await store.read_run_outcome(conn or self.pool, run_id=run_id)
        return row is not None and row.status not in TERMINAL

    async def list_steps(self, run_id: str) -> list[StepRecord]:
        """The run's journal in call order."""
        with map_errors():
            return await store.list_steps(self.pool, run_id=run_id)

    async def list_runs(
        self,
        workflow: str | None = None,
        status: str | None = None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
        parent_run_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
        where: str | None = None,
    ) -> Page[Run]:
        """Runs newest first, filtered; `next_cursor` continues the listing. `where` is a
        search expression over attributes, `workflow`, `status` and `created_at`
        (docs/search.md)."""
        if workflow is not None:
            check_workflow_name(workflow)
        if status is not None:
            try:
                status = RunStatus(status).value
            except ValueError:
                allowed = ", ".join(s.value for s in RunStatus)
                raise InvalidInput(f"unknown status {status!r}: use one of {allowed}") from None
        if not 1 <= limit <= self.settings.max_page_size:
            raise InvalidInput(f"limit must be 1-{self.settings.max_page_size}", field="limit")
        tree = None if where is None else parse_where(where)
        with map_errors():
            runs = await search.list_runs_where(
                self.read_pool,
                where=tree,
                workflow=workflow,
                status=status,
                since=since,
                until=until,
                parent_run_id=parent_run_id,
                cursor=cursor,
                limit=limit + 1,
            )
        items = runs[:limit]
        next_cursor = items[-1].run_id if len(runs) > limit else None
        return Page(items, next_cursor)
