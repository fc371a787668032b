"""Routes for workflows and their runs: start, list, get, cancel, signal, steps."""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import APIRouter, Body, Header, Path, Query, Response
from pydantic import Field

from ripple.platform.api.deps import ClientDep, Limit
from ripple.platform.api.hot_routes import HotRoute
from ripple.platform.api.models import (
    JSON_NUMBER,
    MAX_WHERE_LENGTH,
    NO_NUL_PATTERN,
    ApiModel,
    DateTimeIn,
    JsonInt,
    OutModel,
    RunPage,
    StepOut,
    step_out,
)
from ripple.platform.api.problems import ProblemError, problem_responses
from ripple.platform.api.results import (
    Canceled,
    SignalOut,
    Started,
    WaitedRun,
    ended,
    existing_run,
    run_page,
    started,
    waited_run,
)
from ripple.platform.api.workflow_stats import workflow_counts
from ripple.platform.client import Client
from ripple.platform.core.deadlines import Deadline, bounded
from ripple.platform.errors import InvalidInput
from ripple.workflows import RunHandle
from ripple.workflows.authoring.definition import NAME_RE
from ripple.workflows.authoring.flow import MAX_PRIORITY

__all__ = ["HOT_ROUTES", "router"]

router = APIRouter(tags=["workflows"])

WorkflowName = Annotated[
    str,
    Path(
        pattern=NAME_RE.pattern,
        description=f"Workflow name: `{NAME_RE.pattern}`.",
        examples=["onboard-user"],
    ),
]
RunIdPath = Annotated[str, Path(min_length=1, max_length=64, examples=["0193c2a4-..."])]
#: Longest relative deadline accepted at the edge (ten years, in seconds).
MAX_DEADLINE_SECONDS = 10 * 365 * 86_400
RUN_STATUSES = ("pending", "running", "sleeping", "waiting", "completed", "failed", "canceled")


class StartRun(ApiModel):
    """Start a run: the input is validated against the workflow's input type."""

    input: Any = Field(default=None, examples=[{"userId": 42, "email": "ann@example.com"}])
    version: Annotated[int, Field(ge=1, le=2_147_483_647), JSON_NUMBER] | None = None
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=255, pattern=NO_NUL_PATTERN, examples=["signup-42"]
    )
    deadline: (
        DateTimeIn | Annotated[float, Field(gt=0, le=MAX_DEADLINE_SECONDS), JSON_NUMBER] | None
    ) = Field(
        default=None,
        description="When the run fails if not finished: ISO-8601 time or seconds from now "
        "(at most ten years).",
        examples=[3600],
    )
    priority: JsonInt = Field(
        default=0,
        ge=0,
        le=MAX_PRIORITY,
        description="Among pending runs of the workflow, higher is claimed first (FIFO within).",
    )
    fairness_key: str | None = Field(
        default=None,
        min_length=0,
        max_length=255,
        pattern=NO_NUL_PATTERN,
        description="The run's fairness key (overrides the key the workflow's Fairness reads "
        "from the input); ignored when the workflow declares no Fairness.",
        examples=["acme"],
    )


class WorkflowSummary(OutModel):
    name: str
    runs: dict[str, int] = Field(description="Run counts by status.")


#: Longest long-poll a request may ask for, in seconds.
MAX_WAIT_SECONDS = 60
WaitQuery = Annotated[
    float | None,
    Query(
        ge=0,
        le=MAX_WAIT_SECONDS,
        description="Long-poll: wait up to this many seconds (at most 60) for the run to end; "
        "`timedOut` says whether it had not.",
    ),
]


async def _waited(client: ClientDep, name: str | None, run_id: str, wait: float | None) -> Any:
    if wait is None:
        return waited_run(await existing_run(client, run_id, name))
    await existing_run(client, run_id, name)
    outcome = await client.wait_run(run_id, wait)
    return waited_run(outcome.run, outcome.timed_out)


StatusQuery = Annotated[str | None, Query(pattern="^(" + "|".join(RUN_STATUSES) + ")$")]
SinceQuery = Annotated[DateTimeIn | None, Query(description="Created at or after (ISO-8601).")]
UntilQuery = Annotated[DateTimeIn | None, Query(description="Created before (ISO-8601).")]
CursorQuery = Annotated[str | None, Query(max_length=512)]
WhereQuery = Annotated[
    str | None,
    Query(
        min_length=1,
        max_length=MAX_WHERE_LENGTH,
        pattern=NO_NUL_PATTERN,
        description='Search: `customer = "acme" and amount > 100` over search attributes and '
        "`workflow`, `status`, `created_at` (docs/search.md); 422 names the position of an error.",
    ),
]
SignalPath = Annotated[
    str, Path(min_length=1, max_length=255, pattern=NO_NUL_PATTERN, examples=["approved"])
]
PayloadBody = Annotated[Any, Body(examples=[{"by": "ann"}])]
KeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=255,
        pattern=NO_NUL_PATTERN,
        description="Retry-safe signal: a repeat with the same key (per run; per event on "
        "`/v1/signals`) returns the first answer and is observed once.",
    ),
]
#: `?idempotencyKey=` on a run signal: still read for clients written before the header was
#: the one documented way, and left out of the OpenAPI document.
KeyQuery = Annotated[
    str | None,
    Query(alias="idempotencyKey", min_length=1, max_length=255, include_in_schema=False),
]


def idempotency_key(header: str | None, other: str | None) -> str | None:
    """The key from the `Idempotency-Key` header, or from the older undocumented place (422
    if both are given and differ)."""
    if header is not None and other is not None and header != other:
        raise InvalidInput(
            "Idempotency-Key header and idempotencyKey differ; send one of them",
            field="idempotencyKey",
        )
    return header if header is not None else other


# The routes by workflow name and the routes by run id alone share these bodies (`name` None:
# any workflow).


async def _signal(
    client: ClientDep,
    name: str | None,
    run_id: str,
    signal: str,
    payload: Any,
    key_header: str | None,
    key_query: str | None,
) -> SignalOut:
    key = idempotency_key(key_header, key_query)
    await existing_run(client, run_id, name)
    result = await client.signal(run_id, signal, payload, idempotency_key=key)
    return SignalOut(delivered=result.delivered, buffered=result.buffered)


async def _steps(client: ClientDep, name: str | None, run_id: str) -> list[StepOut]:
    await existing_run(client, run_id, name)
    return [step_out(step) for step in await client.list_steps(run_id)]


async def _cancel(client: ClientDep, name: str | None, run_id: str) -> Canceled:
    await existing_run(client, run_id, name)
    return Canceled(run_id=run_id, canceled=await client.cancel(run_id))


async def _page(client: ClientDep, **query: Any) -> RunPage:
    try:
        page = await client.list_runs(**query)
    except InvalidInput as exc:
        raise ProblemError.invalid_input(exc) from exc
    return run_page(page)


@router.get("/workflows", response_model=list[WorkflowSummary])
async def list_workflows(client: ClientDep) -> list[WorkflowSummary]:
    """Workflow names that have runs, with run counts by status."""
    counts = await workflow_counts(client.pool, client.workflows.upkeep)
    return [WorkflowSummary(name=name, runs=runs) for name, runs in sorted(counts.items())]


@router.post(
    "/workflows/{name}/runs",
    status_code=201,
    response_model=Started,
    responses=problem_responses(404, 409, 422),
)
async def start_run(
    name: WorkflowName, body: StartRun, client: ClientDep, wait: WaitQuery = None
) -> Started | Response:
    """Start a run by name with raw JSON input; with `wait`, also wait (long-poll) for it to
    end and answer its output or error, or `timedOut: true`.

    A repeat with the same `idempotencyKey` returns the first run's id (also `201`).
    """
    if wait is None:
        return await _start(client, name, body)
    return ended(await client.wait_run((await _create(client, name, body)).run_id, wait))


async def _create(client: Client, name: str, body: StartRun) -> RunHandle[Any]:
    return await client.start(
        name,
        body.input,
        idempotency_key=body.idempotency_key,
        deadline=body.deadline,
        version=body.version,
        priority=body.priority,
        fairness_key=body.fairness_key,
    )


async def _start(client: Client, name: str, body: StartRun) -> Response:
    """A start without `wait`: the route's answer, serialised once (the hot route's too)."""
    # The start and the read of a keyed run's status answer within one RIPPLE_DB_TIMEOUT.
    deadline = Deadline(client.settings.db_timeout)
    run_id = (await _create(client, name, body)).run_id
    answer = await bounded(started(client, run_id, body.idempotency_key), deadline)
    return Response(answer.model_dump_json(), 201, media_type="application/json")


#: `start_run` without `wait` for `HotRoutes` (ripple.platform.api.hot_routes): same model,
#: name check and answer.
HOT_ROUTES: Final = (
    HotRoute(
        prefix="/workflows/",
        suffix="/runs",
        param_ok=lambda name: bool(NAME_RE.fullmatch(name)),
        body=StartRun,
        answer=_start,
    ),
)


@router.get("/workflows/{name}/runs", response_model=RunPage, responses=problem_responses(422))
async def list_runs(
    name: WorkflowName,
    client: ClientDep,
    limit: Limit,
    status: StatusQuery = None,
    since: SinceQuery = None,
    until: UntilQuery = None,
    cursor: CursorQuery = None,
    where: WhereQuery = None,
) -> RunPage:
    """Runs of a workflow, newest first; pass `nextCursor` back as `cursor` for the next page."""
    return await _page(
        client,
        workflow=name,
        status=status,
        since=since,
        until=until,
        limit=limit,
        cursor=cursor,
        where=where,
    )


@router.get(
    "/workflows/{name}/runs/{run_id}", response_model=WaitedRun, responses=problem_responses(404)
)
async def get_run(
    name: WorkflowName, run_id: RunIdPath, client: ClientDep, wait: WaitQuery = None
) -> WaitedRun:
    """One run with its input, output or error; `wait` long-polls until it ended."""
    waited: WaitedRun = await _waited(client, name, run_id, wait)
    return waited


@router.delete(
    "/workflows/{name}/runs/{run_id}", response_model=Canceled, responses=problem_responses(404)
)
async def cancel_run(name: WorkflowName, run_id: RunIdPath, client: ClientDep) -> Canceled:
    """Cancel a run (and its active children). `canceled` is false if it had already ended."""
    return await _cancel(client, name, run_id)


@router.post(
    "/workflows/{name}/runs/{run_id}/signals/{signal}",
    status_code=202,
    response_model=SignalOut,
    responses=problem_responses(404, 409, 422),
)
async def signal_run(
    name: WorkflowName,
    run_id: RunIdPath,
    signal: SignalPath,
    client: ClientDep,
    payload: PayloadBody = None,
    key_header: KeyHeader = None,
    key_query: KeyQuery = None,
) -> SignalOut:
    """Deliver a signal to the run's wait of that name; the body is the payload.

    If no such wait exists yet, the signal is kept and consumed by the first matching wait.
    With an `Idempotency-Key` header, a repeat returns the first answer and is observed once.
    """
    return await _signal(client, name, run_id, signal, payload, key_header, key_query)


@router.get(
    "/workflows/{name}/runs/{run_id}/steps",
    response_model=list[StepOut],
    responses=problem_responses(404),
)
async def list_steps(name: WorkflowName, run_id: RunIdPath, client: ClientDep) -> list[StepOut]:
    """The run's journal in execution order, with timings."""
    return await _steps(client, name, run_id)


# -- the same, addressed by run id alone: a run's canonical address (docs/architecture.md) ----


@router.get("/runs", response_model=RunPage, responses=problem_responses(422))
async def list_all_runs(
    client: ClientDep,
    limit: Limit,
    workflow: Annotated[str | None, Query(pattern=NAME_RE.pattern)] = None,
    status: StatusQuery = None,
    since: SinceQuery = None,
    until: UntilQuery = None,
    cursor: CursorQuery = None,
    where: WhereQuery = None,
) -> RunPage:
    """Runs of every workflow (or one), newest first; `where` searches attributes."""
    return await _page(
        client,
        workflow=workflow,
        status=status,
        since=since,
        until=until,
        limit=limit,
        cursor=cursor,
        where=where,
    )


@router.get("/runs/{run_id}", response_model=WaitedRun, responses=problem_responses(404))
async def get_run_by_id(run_id: RunIdPath, client: ClientDep, wait: WaitQuery = None) -> WaitedRun:
    """One run, by id; `wait` long-polls until it ended (woken by the run's end, not a sleep
    loop) and `timedOut` says whether it had not."""
    waited: WaitedRun = await _waited(client, None, run_id, wait)
    return waited


@router.get("/runs/{run_id}/steps", response_model=list[StepOut], responses=problem_responses(404))
async def list_steps_by_id(run_id: RunIdPath, client: ClientDep) -> list[StepOut]:
    """A run's journal, by run id."""
    return await _steps(client, None, run_id)


@router.delete("/runs/{run_id}", response_model=Canceled, responses=problem_responses(404))
async def cancel_run_by_id(run_id: RunIdPath, client: ClientDep) -> Canceled:
    """Cancel a run, by id."""
    return await _cancel(client, None, run_id)


@router.post(
    "/runs/{run_id}/signals/{signal}",
    status_code=202,
    response_model=SignalOut,
    responses=problem_responses(404, 409, 422),
)
async def signal_run_by_id(
    run_id: RunIdPath,
    signal: SignalPath,
    client: ClientDep,
    payload: PayloadBody = None,
    key_header: KeyHeader = None,
    key_query: KeyQuery = None,
) -> SignalOut:
    """Signal a run, by id; the body is the payload (idempotency key as for the route above)."""
    return await _signal(client, None, run_id, signal, payload, key_header, key_query)
