"""RFC 9457 problem details: the one place errors become HTTP responses.

Maps the `ripple.platform.errors` tree, the workflow errors, request validation, malformed JSON,
unknown routes and wrong methods to `application/problem+json` bodies with `type`, `title`,
`status`, `detail` and `instance` (plus `errors` for validation). It must not know any resource.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Final

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from ripple.platform.core import migrate
from ripple.platform.core.logs import Outage, get_logger
from ripple.platform.errors import (
    ConfigError,
    Conflict,
    Gone,
    InvalidInput,
    NotFound,
    RippleError,
    SchemaIncompatible,
    StorageError,
    Unavailable,
)
from ripple.workflows.errors import (
    NonDeterminismError,
    WorkflowCanceled,
    WorkflowError,
    WorkflowFailed,
)

__all__ = [
    "PROBLEM_JSON",
    "DatabaseOutage",
    "Problem",
    "ProblemError",
    "install_problem_handlers",
    "problem_response",
    "problem_responses",
]

log = get_logger("ripple.api")

PROBLEM_JSON: Final = "application/problem+json"
_TYPE_PREFIX: Final = "urn:ripple:problem:"

#: status -> (slug, title) for problems raised without a more specific kind.
_BY_STATUS: Final[dict[int, tuple[str, str]]] = {
    400: ("bad-request", "Bad request"),
    401: ("unauthorized", "Missing or invalid bearer token"),
    403: ("forbidden", "Forbidden"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    406: ("not-acceptable", "Not acceptable"),
    409: ("conflict", "Conflict"),
    410: ("gone", "Gone"),
    413: ("payload-too-large", "Request body too large"),
    414: ("uri-too-long", "Request URI too long"),
    415: ("unsupported-media-type", "Unsupported media type"),
    422: ("invalid-input", "Invalid input"),
    429: ("rate-limited", "Too many requests"),
    431: ("request-head-too-large", "Request head too large"),
    500: ("internal", "Internal server error"),
    503: ("unavailable", "Service unavailable"),
    504: ("timeout", "Timed out"),
}


class ValidationItem(BaseModel):
    """One validation failure: where (`loc`), what (`type`) and a human message."""

    loc: list[str | int]
    msg: str
    type: str


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    type: str = Field(examples=["urn:ripple:problem:not-found"])
    title: str = Field(examples=["Not found"])
    status: int = Field(examples=[404])
    detail: str | None = Field(default=None, examples=["no run 0193... of workflow onboard-user"])
    instance: str | None = Field(default=None, examples=["/v1/workflows/onboard-user/runs/0193"])
    errors: list[ValidationItem] | None = None


class ProblemError(Exception):
    """Raise inside a route to answer with a problem of this status (and optional slug)."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        slug: str | None = None,
        headers: dict[str, str] | None = None,
        errors: list[dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.slug = slug
        self.headers = headers
        self.errors = errors

    @classmethod
    def invalid_input(cls, exc: InvalidInput, location: str = "query") -> ProblemError:
        """A 422 for `exc`, naming its field (under `location`) in `errors` when it has one."""
        message = exc.message
        errors = None
        if exc.field:
            errors = [{"loc": [location, exc.field], "msg": message, "type": "invalid_input"}]
        return cls(422, message, slug="invalid-input", errors=errors)


def problem_response(
    status: int,
    detail: str | None,
    *,
    instance: str | None = None,
    slug: str | None = None,
    title: str | None = None,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
    extensions: dict[str, Any] | None = None,
) -> JSONResponse:
    """A `application/problem+json` response (`extensions`: more members, RFC 9457 3.2)."""
    default_slug, default_title = _BY_STATUS.get(status, ("error", "Error"))
    body: dict[str, Any] = {
        "type": _TYPE_PREFIX + (slug or default_slug),
        "title": title or default_title,
        "status": status,
        "detail": detail,
        "instance": instance,
    }
    if errors is not None:
        body["errors"] = errors
    if extensions:
        body.update(extensions)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses=` entries documenting problem+json answers."""
    return {
        status: {
            "model": Problem,
            "content": {PROBLEM_JSON: {}},
            "description": _BY_STATUS.get(status, ("error", "Error"))[1],
        }
        for status in statuses
    }


def _loc(parts: Any) -> list[str | int]:
    return [p if isinstance(p, int) else str(p) for p in parts]


def _validation_items(errors: Any) -> list[dict[str, Any]]:
    return [
        {"loc": _loc(err.get("loc", ())), "msg": str(err.get("msg", "")), "type": err.get("type")}
        for err in errors
    ]


def _status_for(exc: RippleError) -> tuple[int, str | None]:
    if isinstance(exc, SchemaIncompatible):
        return 409, "schema-incompatible"
    if isinstance(exc, InvalidInput):
        return 422, "invalid-input"
    if isinstance(exc, NotFound):
        return 404, "not-found"
    if isinstance(exc, Conflict):
        return 409, "conflict"
    if isinstance(exc, Gone):
        return 410, "gone"
    if isinstance(exc, Unavailable):
        return 503, "unavailable"
    if isinstance(exc, ConfigError | StorageError):
        return 500, "internal"
    return 400, "bad-request"


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return problem_response(
        exc.status,
        exc.detail,
        instance=request.url.path,
        slug=exc.slug,
        errors=exc.errors,
        headers=exc.headers,
    )


#: Seconds between checks of whether the database answers again, while 503s are answered.
RECOVERY_CHECK_EVERY: Final = 1.0


class DatabaseOutage:
    """The 503s one API app answers during a database outage, logged as one outage: an
    `api_unavailable` warning at the first (with `path` and `error`), the rest counted (a
    reminder with the count at most once a minute), and one `api_recovered` info line with
    `failures` and `duration_s` once `probe()` succeeds with no 503 answered since the
    previous check. A traceback per 503 says nothing the first warning did not."""

    def __init__(self, probe: Callable[[], Awaitable[object]] | None) -> None:
        self._outage = Outage(log, "api_unavailable", "api_recovered")
        self._probe = probe
        self._watch: asyncio.Task[None] | None = None

    def failed(self, exc: Unavailable, path: str) -> None:
        self._outage.failed(exc, path=path)
        if self._probe is not None and (self._watch is None or self._watch.done()):
            self._watch = asyncio.create_task(self._watch_recovery(self._probe))

    async def _watch_recovery(self, probe: Callable[[], Awaitable[object]]) -> None:
        while self._outage.ongoing:
            seen = self._outage.failures
            await asyncio.sleep(RECOVERY_CHECK_EVERY)
            try:
                await probe()
            except Unavailable:
                continue
            except RippleError:
                return  # the client was closed: nothing left to watch
            if self._outage.failures == seen:
                self._outage.recovered()


def _database_outage(request: Request) -> DatabaseOutage:
    """The app's `DatabaseOutage`, made on its first 503 (probing the app's client)."""
    state = request.app.state
    outage: DatabaseOutage | None = getattr(state, "database_outage", None)
    if outage is None:
        client = getattr(state, "client", None)
        probe = None if client is None else (lambda: migrate.pending_migrations(client.pool))
        outage = state.database_outage = DatabaseOutage(probe)
    return outage


async def _on_ripple(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RippleError)
    status, slug = _status_for(exc)
    if isinstance(exc, Unavailable):
        _database_outage(request).failed(exc, request.url.path)
    elif status >= 500:
        log.error("api_error", path=request.url.path, error=type(exc).__name__, exc_info=exc)
    # 500s never echo internals (a driver message may contain data); 503 says what to do.
    detail = exc.message if status < 500 or status == 503 else "the server failed; see logs"
    headers = {"Retry-After": "1"} if status == 503 else None
    errors = None
    field = getattr(exc, "field", None)
    if status == 422 and field:
        errors = [{"loc": ["body", field], "msg": exc.message, "type": "invalid_input"}]
    extensions = {"problems": exc.problems} if isinstance(exc, SchemaIncompatible) else None
    return problem_response(
        status,
        detail,
        instance=request.url.path,
        slug=slug,
        errors=errors,
        headers=headers,
        extensions=extensions,
    )


async def _on_workflow(request: Request, exc: Exception) -> JSONResponse:
    slug = "conflict"
    if isinstance(exc, NonDeterminismError):
        slug = "non-determinism"
    elif isinstance(exc, WorkflowFailed):
        slug = "workflow-failed"
    elif isinstance(exc, WorkflowCanceled):
        slug = "workflow-canceled"
    return problem_response(409, str(exc), instance=request.url.path, slug=slug)


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    malformed = [err for err in errors if err.get("type") == "json_invalid"]
    if malformed:
        reason = (malformed[0].get("ctx") or {}).get("error", "malformed JSON")
        return problem_response(
            400,
            f"request body is not valid JSON: {reason}",
            instance=request.url.path,
            slug="malformed-json",
            title="Malformed JSON",
        )
    return problem_response(
        422,
        "request validation failed: see `errors`",
        instance=request.url.path,
        errors=_validation_items(errors),
    )


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    status = exc.status_code
    detail = exc.detail if isinstance(exc.detail, str) else None
    if status == 404 and detail in (None, "Not Found"):
        detail = f"no route {request.method} {request.url.path}; see /openapi.json"
    elif status == 405 and detail in (None, "Method Not Allowed"):
        detail = f"{request.method} is not allowed on {request.url.path}"
    return problem_response(
        status, detail, instance=request.url.path, headers=dict(exc.headers or {}) or None
    )


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error("api_unhandled_error", path=request.url.path, exc_info=exc)
    return problem_response(500, "the server failed; see logs", instance=request.url.path)


def install_problem_handlers(app: FastAPI) -> None:
    """Answer every error raised by routes, validation and routing with problem+json."""
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(RippleError, _on_ripple)
    app.add_exception_handler(WorkflowError, _on_workflow)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_unexpected)
