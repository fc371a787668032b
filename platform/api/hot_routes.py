"""The hottest routes (publish, start) answered without FastAPI's per-request machinery.

For every request FastAPI matches the route through its routers, solves the dependency tree
(auth, the client), reads and parses the body and validates it through generic field code: most
of `ripple serve`'s CPU for a publish, far more than the publish itself (`python -m bench --only
rest` prints the API's CPU per request). `HotRoutes` answers the common case of a hot route
itself: an authorised `POST` without a query string, with a JSON body that the route's own model
accepts. It uses the route's model, path-parameter check and answer function, so the answer is
the route's.

Every other request, including every one that gets an error before the route's code runs (a
missing or wrong token, a path parameter or a body the route refuses, a query, another content
type), goes down the normal stack untouched, so those answers stay FastAPI's. An error raised
by the answer itself (a `RippleError` from the client) gets the app's exception handler for it,
as it would in the route. The middleware sits inside `RequestLimits` and `AllowedMethods`, so
body limits, strict JSON and method checks apply first either way.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi.security.utils import get_authorization_scheme_param
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ripple.platform.access.actors import acting_as
from ripple.platform.access.scopes import Kind, Need
from ripple.platform.api.access import Access, Principal, request_id
from ripple.platform.client import Client

__all__ = ["HotRoute", "HotRoutes"]

Handlers = Mapping[Any, Callable[[Request, Any], Response | Awaitable[Response]]]

#: The scope kind each hot route needs, by its path prefix; its path parameter is the value.
_NEEDS: dict[str, Kind] = {"/v1/topics/": "publish", "/v1/workflows/": "start"}


@dataclass(frozen=True, slots=True)
class HotRoute:
    """A `POST {prefix}{param}{suffix}` route: `param_ok` is the route's check of the one path
    parameter, `body` its body model, `answer(client, param, body)` its answer."""

    prefix: str
    suffix: str
    param_ok: Callable[[str], bool]
    body: type[BaseModel]
    answer: Callable[[Client, str, Any], Awaitable[Response]]

    def param(self, path: str) -> str | None:
        """The path parameter if `path` is this route's and the route accepts it, else None."""
        if not (path.startswith(self.prefix) and path.endswith(self.suffix)):
            return None
        value = path[len(self.prefix) : len(path) - len(self.suffix)]
        if not value or "/" in value or not self.param_ok(value):
            return None
        return value


class HotRoutes:
    """ASGI middleware: answers the common case of `routes` itself (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        routes: Sequence[HotRoute],
        client: Client,
        access: Access,
        handlers: Callable[[], Handlers],
    ) -> None:
        self.app = app
        self._routes = tuple(routes)
        self._client = client
        self._access = access
        self._handlers = handlers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope.get("query_string")
            or scope.get("root_path")  # mounted or proxied under a prefix: the routers know
        ):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        for route in self._routes:
            param = route.param(path)
            if param is not None:
                break
        else:
            await self.app(scope, receive, send)
            return
        principal = await self._principal(scope, route, param)
        if principal is None:
            await self.app(scope, receive, send)
            return
        body, messages = await _read(receive)
        value = _valid_body(route.body, body) if body is not None else None
        if value is None:
            await self.app(scope, _replay(messages, receive), send)
            return
        try:
            await self._access.admit(principal)
            with acting_as(principal.actor(request_id(scope["headers"]))):
                response = await route.answer(self._client, param, value)
        except Exception as exc:
            response = await self._handled(scope, exc)
        await response(scope, receive, send)

    async def _principal(self, scope: Scope, route: HotRoute, param: str) -> Principal | None:
        """The request's principal if it has a JSON body and a token allowed this route."""
        secret = self._hot_headers(scope)
        if secret is False:
            return None
        kind = _NEEDS.get(route.prefix)
        if kind is None:
            return None
        try:
            principal = await self._access.principal(None if secret is True else str(secret))
        except Exception:  # the normal stack answers (with the error's own problem)
            return None
        if principal is None or not principal.permits(Need(kind, param)):
            return None
        return principal

    def _hot_headers(self, scope: Scope) -> str | bool:
        """For a JSON body, the bearer secret (True when none is sent); else False.

        The first of repeated headers counts, as in Starlette's `Headers.get`."""
        authorization = content_type = None
        for name, value in scope["headers"]:
            if name == b"authorization" and authorization is None:
                authorization = value.decode("latin-1")
            elif name == b"content-type" and content_type is None:
                content_type = value.decode("latin-1")
        if content_type is None:
            return False
        media = content_type.split(";", 1)[0].strip().lower()
        if media != "application/json" and not (
            media.startswith("application/") and media.endswith("+json")
        ):
            return False
        if authorization is None:
            return True
        scheme, credentials = get_authorization_scheme_param(authorization)  # as HTTPBearer does
        if scheme.lower() != "bearer" or not credentials:
            return True  # as HTTPBearer: no token
        return credentials

    async def _handled(self, scope: Scope, exc: Exception) -> Response:
        """The app's answer to `exc` raised by a route; re-raised when only the catch-all
        `Exception` handler applies (the outermost middleware runs that one, as for a route)."""
        handlers = self._handlers()
        for cls in type(exc).__mro__:
            if cls is Exception:
                break
            handler = handlers.get(cls)
            if handler is not None:
                response = handler(Request(scope), exc)
                return await response if inspect.isawaitable(response) else response
        raise exc


def _valid_body(model: type[BaseModel], body: bytes) -> BaseModel | None:
    """`body` parsed as the route parses it (`json.loads`) and validated by `model`, or None."""
    if not body:
        return None
    try:
        return model.model_validate(json.loads(body))
    except (ValueError, RecursionError, ValidationError):
        return None


async def _read(receive: Receive) -> tuple[bytes | None, list[Message]]:
    """The whole body (None if the client left first) and the messages it came in."""
    messages: list[Message] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return None, messages
        if not message.get("more_body", False):
            break
    if len(messages) == 1:
        return messages[0].get("body", b""), messages
    return b"".join(m.get("body", b"") for m in messages), messages


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A `receive` that gives `messages` again, then what `receive` gives."""
    pending = list(messages)

    async def replay() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replay
