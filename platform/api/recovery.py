"""Routes for operating runs and events after the fact: retry, fork, bulk cancel and retry,
and replaying retained events to one subscription."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path
from pydantic import Field

from ripple.platform.api.deps import ClientDep, UuidPath
from ripple.platform.api.models import NO_NUL_PATTERN, ApiModel, DateTimeIn, JsonBool
from ripple.platform.api.problems import problem_responses
from ripple.platform.api.results import BulkOut, ReplayOut, RunAction, run_action
from ripple.workflows.authoring.definition import NAME_RE

__all__ = ["router"]

router = APIRouter(tags=["operations"])

RunIdPath = Annotated[str, Path(min_length=1, max_length=64, examples=["0193c2a4-..."])]
SubscriptionId = UuidPath
#: The statuses each bulk action acts on (what `cancel_many` / `retry_many` accept).
_ACTIVE_STATUS = "^(pending|running|sleeping|waiting)$"
_RETRYABLE_STATUS = "^(failed|canceled)$"


class ForkIn(ApiModel):
    from_step: str = Field(
        min_length=1,
        pattern=NO_NUL_PATTERN,
        max_length=255,
        description="Step key to run again: the journal is copied up to, not including, it.",
        examples=["charge"],
    )
    input: Any = Field(default=None, description="New input (default: the original's).")


class RunFilterIn(ApiModel):
    """Which runs a bulk action acts on (the list filters). Runs created after the request
    started are never touched."""

    workflow: str | None = Field(default=None, pattern=NAME_RE.pattern)
    since: DateTimeIn | None = Field(default=None, description="Created at or after.")
    until: DateTimeIn | None = Field(default=None, description="Created before.")
    created_before: DateTimeIn | None = Field(default=None, description="Created before.")
    dry_run: JsonBool = Field(default=False, description="Only count the matching runs.")


class CancelFilterIn(RunFilterIn):
    """Which active runs to cancel (the list filters)."""

    status: str | None = Field(
        default=None, pattern=_ACTIVE_STATUS, description="An active status (default: all)."
    )


class RetryFilterIn(RunFilterIn):
    """Which failed or canceled runs to retry (the list filters)."""

    status: str | None = Field(
        default=None, pattern=_RETRYABLE_STATUS, description="failed or canceled (default: both)."
    )


class ReplayIn(ApiModel):
    since: DateTimeIn = Field(description="Re-deliver events created at or after this time.")
    until: DateTimeIn | None = Field(default=None, description="...and before this (default now).")


def _filter(body: CancelFilterIn | RetryFilterIn) -> dict[str, Any]:
    """The bulk routes' body as the keyword arguments of `cancel_many` / `retry_many`."""
    return {
        "workflow": body.workflow,
        "status": body.status,
        "since": body.since,
        "until": body.until,
        "created_before": body.created_before,
        "dry_run": body.dry_run,
    }


@router.post(
    "/runs/cancel",
    response_model=BulkOut,
    responses=problem_responses(422),
)
async def cancel_many(body: CancelFilterIn, client: ClientDep) -> BulkOut:
    """Cancel every active run matching the filter, in batches; returns how many."""
    count = await client.cancel_many(**_filter(body))
    return BulkOut(count=count, dry_run=body.dry_run)


@router.post(
    "/runs/retry",
    response_model=BulkOut,
    responses=problem_responses(422),
)
async def retry_many(body: RetryFilterIn, client: ClientDep) -> BulkOut:
    """Retry every failed or canceled run matching the filter, in batches; returns how many."""
    count = await client.retry_many(**_filter(body))
    return BulkOut(count=count, dry_run=body.dry_run)


@router.post(
    "/runs/{run_id}/retry",
    response_model=RunAction,
    responses=problem_responses(404, 409),
)
async def retry_run(run_id: RunIdPath, client: ClientDep) -> RunAction:
    """Resume a failed or canceled run in place: recorded steps keep their results, the failed
    step runs again. `409` for an active or completed run."""
    await client.retry(run_id)
    return await run_action(client, run_id)


@router.post(
    "/runs/{run_id}/fork",
    status_code=201,
    response_model=RunAction,
    responses=problem_responses(404, 422),
)
async def fork_run(run_id: RunIdPath, body: ForkIn, client: ClientDep) -> RunAction:
    """Start a new run from the run's journal up to (not including) `fromStep`, on the newest
    version served. `422` when the step is not in the journal."""
    handle = await client.fork(run_id, body.from_step, body.input)
    return await run_action(client, handle.run_id)


@router.post(
    "/subscriptions/{subscription_id}/replay",
    response_model=ReplayOut,
    responses=problem_responses(404, 422),
)
async def replay(subscription_id: SubscriptionId, body: ReplayIn, client: ClientDep) -> ReplayOut:
    """Re-deliver the retained events of a time range to this subscription only (same event
    ids, new deliveries). `422` when `since` is older than the event retention."""
    return ReplayOut(replayed=await client.replay_events(subscription_id, body.since, body.until))
