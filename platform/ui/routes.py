"""The dashboard: server-rendered pages under `/ui/`, reading through the `Client`.

Every page is one Jinja2 template (autoescaped) that re-fetches itself every two seconds with
the vendored htmx. State changes are POSTed forms carrying the session's CSRF token and answer
with a redirect back to the page (303). See `auth` for sessions.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Annotated, Any, Final
from urllib.parse import parse_qs, urlencode

import jinja2
from fastapi import APIRouter, Depends, FastAPI, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from ripple.platform.access.actors import acting_as
from ripple.platform.access.scopes import Need
from ripple.platform.api.access import ENV, LOCAL, Access, Principal, request_id
from ripple.platform.api.deps import get_client
from ripple.platform.api.models import MAX_WHERE_LENGTH
from ripple.platform.api.problems import ProblemError
from ripple.platform.api.runs import RUN_STATUSES
from ripple.platform.client import Client
from ripple.platform.core.config import Settings
from ripple.platform.errors import Conflict, InvalidInput, NotFound, RippleError
from ripple.platform.events.event_store import get_event
from ripple.platform.ops.observability import LIVE_LEASES
from ripple.platform.ops.observability_store import select_webhook_gauges
from ripple.platform.ui import store, views
from ripple.platform.ui.auth import COOKIE, SESSION_SECONDS, Sessions

__all__ = ["mount_ui"]

PREFIX: Final = "/ui"
#: Rows per page of the runs and deliveries lists.
PAGE_SIZE: Final = 50
#: Queues shown on the queues page and the overview.
MAX_QUEUES: Final = 100
#: Journal entries the run page shows (and offers to fork from).
MAX_STEPS: Final = 500
#: Messages and dead letters a queue peek shows.
PEEK_SIZE: Final = 20
#: What an action refuses with a message on the page (anything else is a problem response).
_REFUSED: Final = (InvalidInput, NotFound, Conflict)
#: Run statuses `Client.retry` accepts.
RETRYABLE: Final = frozenset({"failed", "canceled"})
_STATIC: Final = {"htmx.min.js": "text/javascript", "style.css": "text/css"}

_env = jinja2.Environment(
    loader=jinja2.PackageLoader("ripple.platform.ui", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)
_env.globals["queue_cap"] = store.QUEUE_CAP
_env.filters.update(
    pretty=views.pretty,
    ts=views.ts,
    ago=views.ago,
    until=views.until,
    duration=views.duration,
)


class _Redirect(Exception):
    def __init__(self, location: str) -> None:
        self.location = location


def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.ui_sessions
    return sessions


def _auth_on(request: Request) -> bool:
    settings: Settings = request.app.state.settings
    return bool(settings.api_tokens)


def _loopback(request: Request) -> bool:
    host = request.client.host if request.client else ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host in ("localhost", "testclient")


async def _principal(request: Request, name: str) -> Principal | None:
    """The principal a session names, if it may still use the dashboard (a stored token is
    checked for revocation and expiry on every request, within the token cache's TTL)."""
    if name == "env":
        return ENV if _auth_on(request) else None
    if name == "local":
        return None if _auth_on(request) else LOCAL
    client: Client = request.app.state.client
    token = await client.tokens.active(name)
    return None if token is None else Principal.of(token)


async def page_session(request: Request) -> str:
    """The session nonce of a page view; redirects to the login (or issues a session when
    auth is off). The session's principal needs the `read` scope."""
    found = _sessions(request).session(request.cookies.get(COOKIE))
    principal = None if found is None else await _principal(request, found[1])
    if found is not None and principal is not None:
        if not principal.permits(Need("read")):
            raise ProblemError(403, "this token lacks the scope 'read' the dashboard needs")
        request.state.ui_principal = principal
        return found[0]
    if _auth_on(request):
        raise _Redirect(f"{PREFIX}/login?" + urlencode({"next": request.url.path}))
    if not _loopback(request):
        raise ProblemError(403, "the dashboard without RIPPLE_API_TOKENS is for loopback only")
    cookie = _sessions(request).issue("local")
    request.state.new_session = cookie
    request.state.ui_principal = LOCAL
    nonce = _sessions(request).nonce(cookie)
    assert nonce is not None
    return nonce


async def _form(request: Request) -> tuple[dict[str, str], Principal]:
    """The submitted form and its session's principal: refused (403) without a valid session
    or CSRF token."""
    found = _sessions(request).session(request.cookies.get(COOKIE))
    principal = None if found is None else await _principal(request, found[1])
    if found is None or principal is None:
        raise ProblemError(403, "no dashboard session: log in at /ui/login and submit again")
    form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
    if not _sessions(request).csrf_valid(found[0], form.get("csrf")):
        raise ProblemError(403, "missing or invalid CSRF token: reload the page and submit again")
    return form, principal


async def form_session(request: Request) -> AsyncIterator[dict[str, str]]:
    """The submitted form of a state change, which needs the `operate` scope; the action runs
    as the session's principal (its audit rows name the token)."""
    form, principal = await _form(request)
    access: Access = request.app.state.access
    access.require(principal, Need("operate"))
    with acting_as(principal.actor(request_id(request.scope["headers"]))):
        yield form


async def logout_form(request: Request) -> dict[str, str]:
    """The logout form: any valid session with its CSRF token."""
    form, _ = await _form(request)
    return form


Session = Annotated[str, Depends(page_session)]
Form = Annotated[dict[str, str], Depends(form_session)]
ClientDep = Annotated[Client, Depends(get_client)]


def _set_cookie(request: Request, response: Response, value: str) -> None:
    response.set_cookie(
        COOKIE,
        value,
        max_age=SESSION_SECONDS,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def render(request: Request, nonce: str, template: str, **context: Any) -> HTMLResponse:
    html = _env.get_template(template).render(
        request=request,
        csrf=_sessions(request).csrf(nonce),
        auth_on=_auth_on(request),
        can_operate=_can_operate(request),
        path=request.url.path,
        self_url=str(request.url.path) + ("?" + request.url.query if request.url.query else ""),
        now=datetime.now(UTC),
        **context,
    )
    response = HTMLResponse(html, headers={"Cache-Control": "no-store"})
    new = getattr(request.state, "new_session", None)
    if new is not None:
        _set_cookie(request, response, new)
    return response


def _can_operate(request: Request) -> bool:
    principal: Principal | None = getattr(request.state, "ui_principal", None)
    return principal is not None and principal.permits(Need("operate"))


def back(to: str, message: str | None = None) -> RedirectResponse:
    """303 to a dashboard page, with a flash message in the query."""
    query = "?" + urlencode({"msg": message}) if message else ""
    return RedirectResponse(to + query, status_code=303)


router = APIRouter(prefix=PREFIX, include_in_schema=False)


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in _STATIC:
        raise ProblemError(404, f"no static file {name}")
    data = resources.files("ripple.platform.ui").joinpath("static", name).read_bytes()
    return Response(data, media_type=_STATIC[name], headers={"Cache-Control": "max-age=3600"})


@router.get("/login")
async def login_page(request: Request, next: str = "/ui/", error: str | None = None) -> Response:
    if not _auth_on(request):
        return RedirectResponse(f"{PREFIX}/", status_code=303)
    html = _env.get_template("login.html").render(next=_safe_next(next), error=error)
    return HTMLResponse(html, headers={"Cache-Control": "no-store"})


def _safe_next(value: str) -> str:
    """Only same-site dashboard paths (no open redirect)."""
    return value if value.startswith(f"{PREFIX}/") and not value.startswith("//") else "/ui/"


@router.post("/login")
async def login(request: Request) -> Response:
    form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
    settings: Settings = request.app.state.settings
    target = _safe_next(form.get("next", "/ui/"))
    access: Access = request.app.state.access
    principal = None
    if settings.api_tokens:
        principal = await access.principal(form.get("token") or "")
    if principal is None or not principal.permits(Need("read")):
        error = (
            "That token cannot read the dashboard (it needs the read scope)."
            if principal is not None
            else "That token is not valid (unknown, revoked or expired)."
        )
        query = urlencode({"next": target, "error": error})
        return RedirectResponse(f"{PREFIX}/login?{query}", status_code=303)
    response = RedirectResponse(target, status_code=303)
    _set_cookie(request, response, _sessions(request).issue(principal.token_id or principal.name))
    return response


@router.post("/logout")
async def logout(
    request: Request, form: Annotated[dict[str, str], Depends(logout_form)]
) -> Response:
    response = RedirectResponse(f"{PREFIX}/login" if _auth_on(request) else "/ui/", 303)
    response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return response


# -- overview ---------------------------------------------------------------------------------


@router.get("/")
async def overview(request: Request, nonce: Session, client: ClientDep) -> Response:
    now = datetime.now(UTC)
    # Aggregates over many rows: the read replica's, when RIPPLE_DATABASE_READ_URL is set.
    runs = await store.recent_runs(
        client.read_pool, now - timedelta(days=1), timedelta(hours=1), buckets=30, now=now
    )
    created, failed = runs.created, runs.failed
    async with client.read_pool.acquire() as conn:
        webhooks = await select_webhook_gauges(conn)
    live = client.settings.lease_seconds * LIVE_LEASES
    stranded = await store.stranded_sample(client.read_pool, live)
    failing_ids = {w.subscription_id for w in webhooks if w.failing}
    failing = [s for s in await client.list_subscriptions() if s.id in failing_ids]
    queues = await _queue_rows(client)
    return render(
        request,
        nonce,
        "overview.html",
        hour=runs.recent_counts,
        day=runs.counts,
        statuses=RUN_STATUSES,
        stranded_per_workflow=store.STRANDED_PER_WORKFLOW,
        queues=queues,
        failing=failing,
        stranded=stranded,
        throughput=views.sparkline(created),
        failures=views.sparkline(failed),
        created_total=sum(created),
        failed_total=sum(failed),
    )


# -- runs -------------------------------------------------------------------------------------

_RANGES: Final = {"1h": timedelta(hours=1), "24h": timedelta(days=1), "7d": timedelta(days=7)}


@router.get("/runs")
async def runs(
    request: Request,
    nonce: Session,
    client: ClientDep,
    workflow: Annotated[str | None, Query(max_length=255)] = None,
    status: Annotated[str | None, Query(max_length=32)] = None,
    range: Annotated[str | None, Query(max_length=8)] = None,
    q: Annotated[str | None, Query(max_length=64)] = None,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
    where: Annotated[str | None, Query(max_length=MAX_WHERE_LENGTH)] = None,
) -> Response:
    if q and await client.get_run(q.strip()) is not None:
        return RedirectResponse(f"{PREFIX}/runs/{q.strip()}", status_code=303)
    since = datetime.now(UTC) - _RANGES[range] if range in _RANGES else None
    error = None
    try:
        page = await client.list_runs(
            workflow or None,
            status or None,
            since=since,
            limit=PAGE_SIZE,
            cursor=cursor or None,
            where=where or None,
        )
    except RippleError as exc:
        error, page = str(exc), None
    filters = {
        "workflow": workflow or "",
        "status": status or "",
        "range": range or "",
        "where": where or "",
    }
    next_url = None
    if page is not None and page.next_cursor:
        next_url = "?" + urlencode({**filters, "cursor": page.next_cursor})
    return render(
        request,
        nonce,
        "runs.html",
        page=page,
        filters=filters,
        statuses=RUN_STATUSES,
        ranges=list(_RANGES),
        q=q or "",
        not_found=bool(q),
        error=error,
        next_url=next_url,
    )


@router.get("/runs/{run_id}")
async def run_page(request: Request, run_id: str, nonce: Session, client: ClientDep) -> Response:
    run = await client.get_run(run_id)
    if run is None:
        raise ProblemError(404, f"no run {run_id}")
    steps, more_steps = await store.run_steps(client.pool, run_id, MAX_STEPS)
    children = await client.list_runs(parent_run_id=run_id, limit=PAGE_SIZE)
    approvals = await client.approvals.list(False, run_id=run_id)
    event_id = None
    if run.idempotency_key and run.idempotency_key.startswith("event:"):
        event_id = run.idempotency_key.split(":")[1]
    return render(
        request,
        nonce,
        "run.html",
        run=run,
        steps=steps,
        timeline=views.timeline(run, steps),
        waits=await store.pending_waits(client.pool, run_id),
        signals=await store.pending_signals(client.pool, run_id),
        approvals=approvals,
        children=children.items,
        more_steps=more_steps,
        max_steps=MAX_STEPS,
        fork_steps=[s.key for s in steps if s.seq >= 0],
        retryable=run.status in RETRYABLE,
        event_id=event_id,
        trace_id=await store.run_trace_id(client.pool, run_id),
        msg=request.query_params.get("msg"),
    )


@router.post("/runs/{run_id}/cancel")
async def cancel(run_id: str, form: Form, client: ClientDep) -> Response:
    try:
        canceled = await client.cancel(run_id)
    except _REFUSED as exc:
        return back(f"{PREFIX}/runs/{run_id}", f"Not canceled: {exc.message}")
    return back(f"{PREFIX}/runs/{run_id}", "Canceled." if canceled else "The run had ended.")


@router.post("/runs/{run_id}/signal")
async def signal(run_id: str, form: Form, client: ClientDep) -> Response:
    name = form.get("name", "").strip()
    if not name:
        return back(f"{PREFIX}/runs/{run_id}", "A signal needs a name.")
    try:
        payload = json.loads(form.get("payload") or "null")
    except ValueError as exc:
        return back(f"{PREFIX}/runs/{run_id}", f"The payload is not valid JSON: {exc}")
    try:
        result = await client.signal(run_id, name, payload)
    except _REFUSED as exc:
        return back(f"{PREFIX}/runs/{run_id}", f"Not signaled: {exc.message}")
    text = "Signal delivered." if result.delivered else "Signal kept until the run waits on it."
    return back(f"{PREFIX}/runs/{run_id}", text)


@router.post("/runs/{run_id}/retry")
async def retry(run_id: str, form: Form, client: ClientDep) -> Response:
    try:
        await client.retry(run_id)
    except _REFUSED as exc:
        return back(f"{PREFIX}/runs/{run_id}", f"Not retried: {exc.message}")
    return back(f"{PREFIX}/runs/{run_id}", "Retried: the run is pending again.")


@router.post("/runs/{run_id}/fork")
async def fork(run_id: str, form: Form, client: ClientDep) -> Response:
    step = form.get("step", "")
    if not step:
        return back(f"{PREFIX}/runs/{run_id}", "Choose the step to fork from.")
    try:
        text = form.get("input", "").strip()
        new_input = json.loads(text) if text else None
    except ValueError as exc:
        return back(f"{PREFIX}/runs/{run_id}", f"The input is not valid JSON: {exc}")
    try:
        handle = await client.fork(run_id, step, new_input)
    except _REFUSED as exc:
        return back(f"{PREFIX}/runs/{run_id}", f"Not forked: {exc.message}")
    return back(f"{PREFIX}/runs/{handle.run_id}", f"Forked from step {step} of {run_id}.")


# -- event trace ------------------------------------------------------------------------------


@router.get("/events/{event_id}")
async def event_page(
    request: Request, event_id: str, nonce: Session, client: ClientDep
) -> Response:
    if not store.is_uuid(event_id):
        raise ProblemError(404, f"no event {event_id}")
    async with client.pool.acquire() as conn:
        event = await get_event(conn, event_id)
    if event is None:
        raise ProblemError(404, f"no event {event_id} (it may have passed retention)")
    explanation = await client.explain(event.topic, event.payload)
    outcomes: dict[str, Any] = {}
    for verdict in explanation.matched:
        outcomes[verdict.subscription_id] = await _outcome(client, event_id, verdict)
    return render(
        request,
        nonce,
        "event.html",
        event=event,
        verdicts=explanation.subscriptions,
        outcomes=outcomes,
    )


async def _outcome(client: Client, event_id: str, verdict: Any) -> dict[str, Any]:
    """What fan-out made of the event for one matched subscription."""
    sub_id, target = verdict.subscription_id, verdict.target
    if verdict.kind == "queue":
        queue = str(target.get("queue"))
        message = await store.queue_message_for(client.pool, queue, f"{event_id}:{sub_id}")
        return {"kind": "queue", "queue": queue, "message": message}
    if verdict.kind == "webhook":
        delivery_id = await store.delivery_id_for(client.pool, event_id, sub_id)
        delivery = await client.deliveries.get(delivery_id) if delivery_id else None
        attempts = await client.deliveries.attempts(delivery_id) if delivery_id else []
        return {"kind": "webhook", "delivery": delivery, "attempts": attempts}
    workflow = str(target.get("workflow"))
    run_id = await store.run_id_for(client.pool, workflow, f"event:{event_id}:{sub_id}")
    run = await client.get_run(run_id) if run_id else None
    return {"kind": "workflow", "workflow": workflow, "run": run}


# -- topics and subscriptions -----------------------------------------------------------------


@router.get("/topics")
async def topics(
    request: Request,
    nonce: Session,
    client: ClientDep,
    topic: Annotated[str | None, Query(max_length=255)] = None,
    payload: Annotated[str | None, Query(max_length=65_536)] = None,
) -> Response:
    explanation, error = None, None
    if topic:
        try:
            explanation = await client.explain(topic, json.loads(payload or "null"))
        except ValueError as exc:
            error = f"The payload is not valid JSON: {exc}"
        except RippleError as exc:
            error = str(exc)
    subscriptions = await client.list_subscriptions()
    hooks = [s.id for s in subscriptions if s.kind == "webhook"]
    endpoints = {e.subscription_id: e for e in await client.deliveries.endpoints(hooks)}
    return render(
        request,
        nonce,
        "topics.html",
        subscriptions=subscriptions,
        endpoints=endpoints,
        topic=topic or "",
        payload=payload or "",
        explanation=explanation,
        error=error,
        msg=request.query_params.get("msg"),
    )


@router.post("/subscriptions/{subscription_id}/{action}")
async def set_paused(subscription_id: str, action: str, form: Form, client: ClientDep) -> Response:
    if action not in ("pause", "resume"):
        raise ProblemError(404, f"no action {action}: use pause or resume")
    try:
        if action == "pause":
            await client.pause_subscription(subscription_id)
        else:
            await client.resume_subscription(subscription_id)
    except _REFUSED as exc:
        return back(f"{PREFIX}/topics", f"Not {action}d: {exc.message}")
    return back(f"{PREFIX}/topics", f"Subscription {action}d.")


@router.post("/subscriptions/{subscription_id}/endpoint/resume")
async def resume_endpoint(subscription_id: str, form: Form, client: ClientDep) -> Response:
    try:
        await client.deliveries.resume_endpoint(subscription_id)
    except _REFUSED as exc:
        return back(f"{PREFIX}/topics", f"Not resumed: {exc.message}")
    return back(f"{PREFIX}/topics", "Endpoint resumed: its waiting deliveries go now.")


# -- queues -----------------------------------------------------------------------------------


@router.get("/queues")
async def queues(request: Request, nonce: Session, client: ClientDep) -> Response:
    rows = await _queue_rows(client)
    peek = request.query_params.get("peek")
    dead: list[Any] = []
    messages: list[store.PeekedMessage] = []
    if peek:
        try:
            dead = await client.queues.dead_letters(peek, PEEK_SIZE)
        except InvalidInput as exc:
            raise ProblemError(404, f"no queue {peek}: {exc.message}") from exc
        messages = await store.peek_messages(client.pool, peek, PEEK_SIZE)
    return render(
        request,
        nonce,
        "queues.html",
        rows=rows,
        peek=peek,
        dead=dead,
        messages=messages,
        peek_size=PEEK_SIZE,
        msg=request.query_params.get("msg"),
    )


async def _queue_rows(client: Client) -> list[tuple[str, store.QueueCounts]]:
    """The first MAX_QUEUES queues and their bounded counts."""
    names = await store.queue_names(client.pool, MAX_QUEUES)
    return [(name, await store.queue_counts(client.pool, name)) for name in names]


@router.post("/queues/{queue}/redrive")
async def redrive_queue(queue: str, form: Form, client: ClientDep) -> Response:
    try:
        count = await client.queues.redrive(queue)
    except _REFUSED as exc:
        return back(f"{PREFIX}/queues", f"Not redriven: {exc.message}")
    return back(f"{PREFIX}/queues", f"Redrove {count} dead letter(s) of {queue}.")


# -- schedules --------------------------------------------------------------------------------

#: Newest runs shown per workflow schedule.
SCHEDULE_RUNS: Final = 5


@router.get("/schedules")
async def schedules(request: Request, nonce: Session, client: ClientDep) -> Response:
    rows = []
    for info in await client.schedules.list():
        last = []
        if info.workflow is not None:
            last = await store.schedule_runs(client.pool, info.workflow, info.name, SCHEDULE_RUNS)
        rows.append((info, last))
    return render(request, nonce, "schedules.html", rows=rows, msg=request.query_params.get("msg"))


@router.post("/schedules/{name}/{action}")
async def schedule_action(name: str, action: str, form: Form, client: ClientDep) -> Response:
    to = f"{PREFIX}/schedules"
    try:
        if action == "pause":
            await client.schedules.pause(name)
            return back(to, f"Schedule {name} paused.")
        if action == "resume":
            await client.schedules.resume(name)
            return back(to, f"Schedule {name} resumed: it fires from its next tick.")
        if action == "trigger":
            run_id = await client.schedules.trigger(name)
            fired = f"started run {run_id}" if run_id else "published its event"
            return back(to, f"Schedule {name} {fired}.")
    except _REFUSED as exc:
        return back(to, f"Not done ({action}): {exc.message}")
    raise ProblemError(404, f"no action {action}: use pause, resume or trigger")


# -- deliveries -------------------------------------------------------------------------------


@router.get("/deliveries")
async def deliveries(
    request: Request,
    nonce: Session,
    client: ClientDep,
    status: Annotated[str, Query(pattern="^(failed|pending|delivered)$")] = "failed",
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> Response:
    page = await client.deliveries.list(status=status, limit=PAGE_SIZE, cursor=cursor)
    items = page.items
    if status == "pending":  # retrying: pending after at least one attempt
        items = [d for d in items if d.attempts > 0]
    attempts = {d.id: await client.deliveries.attempts(d.id) for d in items}
    next_url = (
        "?" + urlencode({"status": status, "cursor": page.next_cursor})
        if (page.next_cursor)
        else None
    )
    return render(
        request,
        nonce,
        "deliveries.html",
        items=items,
        attempts=attempts,
        status=status,
        next_url=next_url,
        msg=request.query_params.get("msg"),
    )


@router.post("/deliveries/{delivery_id}/redrive")
async def redrive_delivery(delivery_id: str, form: Form, client: ClientDep) -> Response:
    try:
        await client.deliveries.redrive(delivery_id)
    except _REFUSED as exc:
        return back(f"{PREFIX}/deliveries", f"Not redriven: {exc.message}")
    return back(f"{PREFIX}/deliveries", "Delivery redriven.")


def mount_ui(app: FastAPI) -> None:
    """Serve the dashboard under /ui/ (and redirect / there)."""
    app.state.ui_sessions = Sessions.for_tokens(app.state.settings.api_tokens)

    async def on_redirect(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, _Redirect)
        return RedirectResponse(exc.location, status_code=303)

    async def root() -> Response:
        return RedirectResponse(f"{PREFIX}/", status_code=307)

    from ripple.platform.ui import catalogue  # imports this module's helpers

    app.add_exception_handler(_Redirect, on_redirect)
    app.add_api_route("/", root, include_in_schema=False)
    app.add_api_route(PREFIX, root, include_in_schema=False)
    app.include_router(router)
    app.include_router(catalogue.router)
    from ripple.platform.ui import audit_page  # it builds on this module's session and render

    app.include_router(audit_page.router)
    from ripple.platform.ui import deploys

    app.include_router(deploys.router)
    from ripple.platform.ui.search_pages import mount_search_pages

    mount_search_pages(app)
