"""What the operator actions answer, built from the `Client`'s records: shared by the routes and
the CLI, which calls the `Client` directly on the database and prints the same JSON shapes.

Nothing here imports FastAPI (the CLI must not load it); a missing run raises `NotFound`,
which the API answers with 404 and the CLI prints.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ripple.platform.api.models import (
    OutModel,
    Published,
    RunOut,
    RunPage,
    camel,
    jsonable,
    run_out,
)
from ripple.platform.errors import InvalidInput, NotFound

if TYPE_CHECKING:
    from ripple.platform.client import Client
    from ripple.platform.events.publish import Explanation, PublishResult
    from ripple.subscribers.queues.queues import QueueStats
    from ripple.workflows.runs.operations import WaitOutcome
    from ripple.workflows.runs.records import Page, Run

__all__ = [
    "BulkOut",
    "Canceled",
    "DeadLetterOut",
    "DeliveryOut",
    "DeliveryPage",
    "EndpointOut",
    "ExplanationOut",
    "MessageOut",
    "Received",
    "Redriven",
    "ReplayOut",
    "Resumed",
    "RunAction",
    "Sent",
    "SignalOut",
    "Started",
    "Stats",
    "Triggered",
    "Verdict",
    "WaitedRun",
    "check_page_size",
    "ended",
    "existing_run",
    "explanation_out",
    "published",
    "run_action",
    "run_page",
    "started",
    "stats_out",
    "waited_run",
]


def check_page_size(limit: int, maximum: int) -> int:
    """`limit` if a list call may return that many, else `InvalidInput` (422)."""
    if limit > maximum:
        raise InvalidInput(f"limit must be at most {maximum} (RIPPLE_MAX_PAGE_SIZE)")
    return limit


# -- runs ---------------------------------------------------------------------------------------


class Started(OutModel):
    run_id: str
    status: str
    output: Any = Field(default=None, description="With `wait`: the output once completed.")
    error: Any = Field(default=None, description="With `wait`: the error once failed.")
    timed_out: bool | None = Field(
        default=None, description="With `wait`: true if the run had not ended when it passed."
    )


class WaitedRun(RunOut):
    timed_out: bool = Field(
        default=False, description="With `wait`: true if the run had not ended when it passed."
    )


class SignalOut(OutModel):
    delivered: bool
    buffered: bool


class Canceled(OutModel):
    run_id: str
    canceled: bool = Field(description="True if the run was still active.")


class Resumed(OutModel):
    resumed: int = Field(description="How many waiting runs the payload resumed.")


class RunAction(OutModel):
    run_id: str
    status: str
    forked_from: str | None = None


class BulkOut(OutModel):
    count: int = Field(description="Runs acted on (with dryRun: runs that match now).")
    dry_run: bool = False


class ReplayOut(OutModel):
    replayed: int = Field(description="Events re-delivered to the subscription.")


async def existing_run(client: Client, run_id: str, workflow: str | None = None) -> Run:
    """The run (of `workflow`, when given); `NotFound` if there is none."""
    run = await client.get_run(run_id)
    if run is None or (workflow is not None and run.workflow != workflow):
        of = f" of workflow {workflow}" if workflow is not None else ""
        raise NotFound(f"no run {run_id}{of}")
    return run


async def started(client: Client, run_id: str, idempotency_key: str | None) -> Started:
    """The answer to a start without `wait`."""
    if idempotency_key is None:
        # A start without a key creates a pending run (or, debounced, joins one not yet
        # started): no read needed. A key may name an earlier run in any state.
        return Started(run_id=run_id, status="pending")
    found = await client.get_run(run_id)
    return Started(run_id=run_id, status=found.status if found is not None else "pending")


def ended(outcome: WaitOutcome) -> Started:
    """The answer to a start with `wait`: the run's end, or its state when the wait passed."""
    run = outcome.run
    return Started(
        run_id=run.run_id,
        status=run.status,
        output=run.output,
        error=run.error,
        timed_out=outcome.timed_out,
    )


def waited_run(run: Run, timed_out: bool = False) -> WaitedRun:
    return WaitedRun.model_validate({**jsonable(run), "timedOut": timed_out})


def run_page(page: Page[Run]) -> RunPage:
    return RunPage(items=[run_out(run) for run in page.items], next_cursor=page.next_cursor)


async def run_action(client: Client, run_id: str) -> RunAction:
    """The answer to a retry or fork: the run as the action left it."""
    run = await client.get_run(run_id)
    assert run is not None  # the action just wrote it
    return RunAction(run_id=run.run_id, status=run.status, forked_from=run.forked_from)


# -- topics -------------------------------------------------------------------------------------


class Verdict(OutModel):
    subscription_id: str
    pattern: str
    kind: str
    target: dict[str, Any]
    status: str
    matched: bool
    reason: str | None = Field(
        default=None, examples=["filter mismatch at 'plan'"], description="Why not, if not."
    )


class ExplanationOut(OutModel):
    topic: str
    subscriptions: list[Verdict]
    waits: int | None = Field(default=None, description="Workflow waits that would resolve.")
    wait_run_ids: list[str] = Field(default_factory=list)
    schema_version: int | None = Field(
        default=None,
        description="The topic schema version the payload is valid against (null: no schema).",
    )


def published(result: PublishResult) -> Published:
    return Published(
        event_id=result.event_id,
        deliveries=result.deliveries,
        duplicate=result.duplicate,
        waits_resolved=result.waits_resolved,
    )


def explanation_out(explanation: Explanation) -> ExplanationOut:
    """The API form of an explanation; webhook secrets are masked."""
    data = jsonable(explanation)
    for verdict in data.get("subscriptions", []):
        if isinstance(verdict.get("target"), dict) and "secret" in verdict["target"]:
            verdict["target"]["secret"] = "whsec_…"
    return ExplanationOut.model_validate(data)


# -- queues -------------------------------------------------------------------------------------


class Sent(OutModel):
    id: str = Field(description="Message id (the first one's for a repeated deduplicationId).")


class Stats(OutModel):
    visible: int
    in_flight: int
    delayed: int
    dead_letters: int
    oldest_age: float = Field(description="Seconds since the oldest visible message was sent.")
    depth: int = Field(description="visible + in flight + delayed.")
    lower_bounds: list[str] = Field(
        default_factory=list,
        description="The counts (`visible`, `inFlight`, `delayed`, `deadLetters`, `depth`) "
        "that stopped at `countCap` messages of one kind: each is at least the number given.",
    )
    count_cap: int = Field(description="Most messages of one kind a count reads.")


def stats_out(stats: QueueStats) -> Stats:
    return Stats.model_validate(
        {
            **jsonable(stats),
            "depth": stats.depth,
            "lowerBounds": sorted(camel(name) for name in stats.lower_bounds),
        }
    )


class DeadLetterOut(OutModel):
    id: str
    body: Any = None
    headers: dict[str, Any] | None = None
    group_id: str | None = None
    receive_count: int
    dead_at: datetime
    created_at: datetime


class MessageOut(OutModel):
    id: str
    body: Any = None
    headers: dict[str, Any] | None = None
    group_id: str | None = None
    receive_count: int | None = None
    receipt: str


class Received(OutModel):
    messages: list[MessageOut]


class Redriven(OutModel):
    redriven: int


# -- deliveries and schedules -------------------------------------------------------------------


class DeliveryOut(OutModel):
    id: str
    subscription_id: str
    event_id: str
    topic: str
    status: str = Field(examples=["failed"], description="pending, delivered or failed.")
    attempts: int
    next_attempt_at: datetime | None = None
    last_status_code: int | None = None
    last_error: str | None = None
    created_at: datetime
    updated_at: datetime
    delivered_at: datetime | None = None


class DeliveryPage(OutModel):
    items: list[DeliveryOut]
    next_cursor: str | None = None


class EndpointOut(OutModel):
    """A webhook subscription's endpoint: its circuit breaker and deliveries in flight."""

    subscription_id: str
    circuit: str = Field(
        examples=["open"], description="closed, or open (one probe per interval) until resumed."
    )
    consecutive_failures: int
    next_probe_at: datetime | None = Field(default=None, description="When an open circuit probes.")
    in_flight: int = Field(description="Deliveries in flight across every dispatcher.")
    failing_since: datetime | None = None
    last_success_at: datetime | None = None
    last_failure_at: datetime | None = None


class Triggered(OutModel):
    run_id: str | None = None
