"""The ASGI application: `create_app(client_or_settings)` wires routes, auth, limits, problems.

Given `Settings`, the app owns a `Client` (connected at startup, closed at shutdown). Given a
`Client`, the caller owns it (the app connects it if needed and never closes it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from starlette.types import Receive, Scope, Send

from ripple.platform.api.access import Access
from ripple.platform.api.deps import require_token
from ripple.platform.api.hot_routes import HotRoute, HotRoutes
from ripple.platform.api.limits import MAX_URI_BYTES, RequestLimits
from ripple.platform.api.methods import AllowedMethods
from ripple.platform.api.problems import PROBLEM_JSON, install_problem_handlers
from ripple.platform.client import Client
from ripple.platform.core.config import Settings

__all__ = ["V1_ROUTES", "create_app"]

#: The `/v1` route modules of `ripple.platform.api`, in the order their routes are matched.
#: FastAPI tries the modules' routers in turn, so topics (publish, the hottest route, whose
#: `/v1/topics/` paths no other module shares) comes first.
V1_ROUTES = (
    "topics",
    "topic_schemas",
    "recovery",
    "runs",
    "signals",
    "subscriptions",
    "queues",
    "deliveries",
    "schedules",
    "audit",
    "cloudevents",
    "wakes",
    "tokens",
    "event_search",
    "approvals",
)

_DESCRIPTION = """
Ripple: publish events to topics, fan them out to queues, webhooks and durable workflows.

All `/v1` routes take `Authorization: Bearer <token>`: a token from `POST /v1/tokens` (401 when
unknown, revoked or expired; 403 naming the scope a request needs; 429 with `Retry-After` over
its rate limit) or one of `RIPPLE_API_TOKENS` (`admin`).
Errors are RFC 9457 `application/problem+json`. Bodies are JSON (415 otherwise), limited to
`RIPPLE_MAX_BODY_BYTES` (413 above it) and JSON nesting to `RIPPLE_MAX_JSON_DEPTH` (422); NaN,
Infinity, lone UTF-16 surrogate escapes and repeated object keys are 422, bodies that are not
UTF-8 or hold integers of more than 4,300 digits 400 (`bad-request`). A database that does not
answer within `RIPPLE_DB_TIMEOUT` gives 503 with `Retry-After`. Lists take `limit` and `cursor`.
"""


class _Api(FastAPI):
    """FastAPI that keeps an unexpected exception of a request inside the app.

    Starlette's `ServerErrorMiddleware` logs it through the app's `Exception` handler, answers
    the 500 (unless the response had started) and then re-raises it for the server, and uvicorn
    answers a re-raised exception by closing the connection, after a complete response without
    `Connection: close`: the client's next request on that keep-alive connection fails. Kept
    here, the connection stays usable; a response cut short is still closed by uvicorn, which
    sees it incomplete.
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await super().__call__(scope, receive, send)
            return
        with contextlib.suppress(Exception):  # logged and answered by ServerErrorMiddleware
            await super().__call__(scope, receive, send)


def create_app(
    client_or_settings: Client | Settings, *, routes: Collection[str] | None = None
) -> FastAPI:
    """The Ripple HTTP API as an ASGI app.

    `routes` (names from `V1_ROUTES`) serves only those `/v1` route modules, without the
    dashboard and the operations routes, importing and building only those. Auth, limits and
    problems are the same.
    """
    unknown = set(routes or ()) - set(V1_ROUTES)
    if unknown:
        raise ValueError(f"unknown route modules {sorted(unknown)}; choose from {V1_ROUTES}")
    if isinstance(client_or_settings, Client):
        client, owned = client_or_settings, False
    else:
        client, owned = Client(settings=client_or_settings), True
    settings = client.settings

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await client.connect()
        try:
            yield
        finally:
            if owned:
                await client.close()

    app = _Api(
        title="Ripple",
        version="1",
        description=_DESCRIPTION,
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        # FastAPI's built-in OpenTelemetry: its HTTP request spans stay (recorded once a tracer
        # provider is installed); its OpenTelemetry metrics and logs are off, because Ripple's
        # metrics are Prometheus and its logs structlog. Each kind left on looks up its global
        # provider (environment variables included) on every request, CPU that
        # `python -m bench --only rest` counts in the API's share of each request.
        telemetry={"metrics": False, "logs": False},
    )
    app.state.client = client
    app.state.settings = settings
    access = Access(client, settings.api_tokens)
    app.state.access = access

    # Each route module straight into the app (FastAPI builds a route again on every include).
    auth = [Depends(require_token)]
    hot: list[HotRoute] = []
    for name in V1_ROUTES:
        if routes is None or name in routes:
            module = importlib.import_module(f"ripple.platform.api.{name}")
            app.include_router(module.router, prefix="/v1", dependencies=auth)
            hot.extend(
                dataclasses.replace(route, prefix=f"/v1{route.prefix}")
                for route in getattr(module, "HOT_ROUTES", ())
            )
    if routes is None:
        from ripple.platform.api import asyncapi, ops
        from ripple.platform.ui.routes import mount_ui

        app.include_router(ops.router)
        app.include_router(asyncapi.router)
        mount_ui(app)
    install_problem_handlers(app)
    # Innermost: publish and start skip FastAPI's per-request work once the limits passed.
    app.add_middleware(
        HotRoutes,
        routes=hot,
        client=client,
        access=access,
        handlers=lambda: app.exception_handlers,
    )
    app.add_middleware(AllowedMethods, paths=lambda: app.openapi()["paths"])
    app.add_middleware(
        RequestLimits, max_body_bytes=settings.max_body_bytes, max_depth=settings.max_json_depth
    )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            _problem_everywhere(schema)
            _declare_enforced(schema, settings)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _problem_everywhere(schema: dict[str, Any]) -> None:
    """Document the problem responses every /v1 route can give (401, 413, 422, 5xx)."""
    ref = {"$ref": "#/components/schemas/Problem"}
    common = {
        "400": "Malformed JSON (`malformed-json`); a body that is not UTF-8 or has an integer "
        "of more than 4,300 digits (`bad-request`)",
        "404": "Not found",
        "405": "Method not allowed",
        "401": "Missing or invalid bearer token (unknown, revoked or expired)",
        "403": "The token lacks the scope this request needs (named in `detail`)",
        "429": "The token is over its rate limit (see `Retry-After`)",
        "413": "Request body too large",
        "414": f"Request URI longer than {MAX_URI_BYTES // 1024} KiB (send large values in a body)",
        "415": "Request body is not JSON (Content-Type)",
        "422": "Invalid input (also NaN/Infinity, a lone UTF-16 surrogate escape or a repeated "
        "key in a JSON object)",
        "503": "Database unavailable; retry",
    }
    for path, item in schema.get("paths", {}).items():
        if path in ("/healthz", "/readyz"):
            for operation in item.values():
                responses = operation.setdefault("responses", {})
                responses["414"] = {
                    "description": common["414"],
                    "content": {PROBLEM_JSON: {"schema": ref}},
                }
            continue
        for operation in item.values():
            responses = operation.setdefault("responses", {})
            for status, description in common.items():
                entry = responses.setdefault(status, {"description": description})
                entry["content"] = {PROBLEM_JSON: {"schema": ref}}


def _declare_enforced(schema: dict[str, Any], settings: Settings) -> None:
    """Declare what the server enforces but FastAPI cannot derive from the route signatures.

    - `limit` query parameters: at most the configured `RIPPLE_MAX_PAGE_SIZE`;
    - parameters marked `x-ripple-json` carry JSON text: declared as `application/json` content
      whose value is not null (what the route parses and accepts);
    - a discriminated union's tag property is required in each member (the server cannot pick
      a member without it, whatever default the Python model has).
    """
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            for param in operation.get("parameters", []):
                param_schema = param.get("schema", {})
                if param.get("in") == "query" and param.get("name") == "limit":
                    param_schema["maximum"] = settings.max_page_size
                if param_schema.pop("x-ripple-json", False):
                    del param["schema"]
                    param["content"] = {
                        "application/json": {
                            "schema": {
                                "not": {"type": "null"},
                                "description": param_schema.get("description", ""),
                            }
                        }
                    }
    components = schema.get("components", {}).get("schemas", {})
    for component in components.values():
        for prop in component.get("properties", {}).values():
            discriminator = prop.get("discriminator")
            if discriminator is None:
                continue
            tag = discriminator["propertyName"]
            for ref in discriminator.get("mapping", {}).values():
                member = components[ref.rsplit("/", 1)[-1]]
                required = member.setdefault("required", [])
                if tag not in required:
                    required.insert(0, tag)
