"""Who is asking and may they: the API's token check, scopes, rate limits and request count.

Every `/v1` route (and `/metrics`) gets `Access.authorize` through `deps.require_token`: the
bearer token is resolved to a `Principal` (a `RIPPLE_API_TOKENS` token is the `admin` principal
`env`; a stored token is looked up by digest in `client.tokens`' cache), the route's `Need` is
derived from its method and path (`need_of`), and the request is refused with 401 (no valid
token), 403 (naming the scope it needed) or 429 (over the token's rate limit) before the route
runs, so a refused request writes nothing. An authorised request runs as the token's `Actor`,
so the audit rows it writes name the token.
"""

from __future__ import annotations

import hmac
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from starlette.requests import Request

from ripple.platform.access.actors import Actor
from ripple.platform.access.scopes import Need, permits
from ripple.platform.access.tokens import Token
from ripple.platform.api.problems import ProblemError
from ripple.platform.client import Client
from ripple.platform.core.limits import RateLimit
from ripple.platform.events.topics import compile_pattern
from ripple.platform.ops.metrics import API_REQUESTS

__all__ = ["Access", "Principal", "need_of", "token_valid"]

CHALLENGE: Final = {"WWW-Authenticate": 'Bearer realm="ripple"'}
_MAX_REQUEST_ID: Final = 128


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller: the token's name, id (None for `env`/`local`) and scopes."""

    name: str
    token_id: str | None
    scopes: tuple[str, ...]
    rate_limit: RateLimit | None = None

    @classmethod
    def of(cls, token: Token) -> Principal:
        """The principal of a stored token."""
        return cls(token.name, token.id, tuple(token.scopes), token.rate_limit)

    def actor(self, request_id: str | None) -> Actor:
        return Actor(name=self.name, token_id=self.token_id, request_id=request_id)

    def permits(self, need: Need) -> bool:
        return permits(self.scopes, need, _topic_matches)


ENV: Final = Principal("env", None, ("admin",))
#: The caller when no RIPPLE_API_TOKENS are configured and no token is presented.
LOCAL: Final = Principal("local", None, ("admin",))


def _topic_matches(pattern: str, topic: str) -> bool:
    return compile_pattern(pattern).matches(topic)


def token_valid(presented: str, tokens: Sequence[str]) -> bool:
    """True if `presented` equals one of `tokens`; compares against all, in constant time."""
    raw = presented.encode()
    ok = False
    for token in tokens:
        ok |= hmac.compare_digest(raw, token.encode())
    return ok


def request_id(headers: Sequence[tuple[bytes, bytes]]) -> str:
    """The request's `X-Request-Id` if it sent a usable one, else a new id."""
    for name, value in headers:
        if name == b"x-request-id":
            text = value.decode("latin-1").strip()
            if 0 < len(text) <= _MAX_REQUEST_ID and text.isprintable():
                return text
            break
    return uuid.uuid4().hex


class Access:
    """The app's authorisation: tokens, scopes, rate limits, per-token request counts."""

    def __init__(self, client: Client, env_tokens: Sequence[str]) -> None:
        self._client = client
        self._env = list(env_tokens)

    @property
    def auth_required(self) -> bool:
        """True when RIPPLE_API_TOKENS is set (else a request without a token is `local`)."""
        return bool(self._env)

    async def principal(self, secret: str | None) -> Principal | None:
        """The principal of a presented bearer secret; None when it is not a valid token.

        Every string that is not a RIPPLE_API_TOKENS token gets the same work: constant-time
        comparison with each of them, then a digest and a cache lookup of stored tokens. A
        RIPPLE_API_TOKENS token skips the lookup (its answer says it is valid anyway), so the
        bootstrap tokens keep working while the database does not answer.
        """
        if secret is None:
            return None if self._env else LOCAL
        if token_valid(secret, self._env):
            return ENV
        stored = await self._client.tokens.authenticate(secret)
        if stored is None:
            return None
        return Principal.of(stored)

    async def authorize(self, principal: Principal, need: Need) -> None:
        """Raise 403 unless `principal` has a scope for `need`, 429 over its rate limit; count
        the request."""
        self.require(principal, need)
        await self.admit(principal)

    async def admit(self, principal: Principal) -> None:
        """Raise 429 with `Retry-After` when `principal` is over its rate limit; else count the
        request (a route whose scope is already checked, such as a hot route, calls this)."""
        limit = principal.rate_limit
        if limit is not None and principal.token_id is not None:
            decision = await self._client.tokens.limiter.check(principal.token_id, limit)
            if not decision.allowed:
                wait = max(1, int(decision.retry_after + 0.999))
                raise ProblemError(
                    429,
                    f"token {principal.name!r} is over its rate limit of {limit.limit} requests "
                    f"per {limit.seconds:g} s; retry after {wait} s",
                    headers={"Retry-After": str(wait)},
                )
        API_REQUESTS.labels(principal.name).inc()

    async def check(self, request: Request, secret: str | None) -> Principal:
        """Authenticate and authorise `request` (see the module doc); raises the problem."""
        principal = await self.principal(secret)
        if principal is None:
            raise ProblemError(
                401,
                "the bearer token is not valid (unknown, revoked or expired); send "
                "`Authorization: Bearer <token>` with a RIPPLE_API_TOKENS token or one from "
                "`ripple tokens create`",
                headers=CHALLENGE,
            )
        need = need_of(request.method, _template(request), request.path_params)
        if need.kind == "signal" and need.value is None:
            if principal.permits(Need("operate")):
                need = Need("operate")
            else:
                run = await self._client.get_run(str(request.path_params.get("run_id", "")))
                need = Need("signal", run.workflow if run is not None else "*")
        if need.kind == "publish" and need.value is None:
            topics = await _cloudevent_topics(request)
            for topic in topics[1:]:
                self.require(principal, Need("publish", topic))
            need = Need("publish", topics[0])
        await self.authorize(principal, need)
        return principal

    def require(self, principal: Principal, need: Need) -> None:
        """Raise 403 naming `need` unless `principal` has a scope for it."""
        if not principal.permits(need):
            raise ProblemError(
                403,
                f"this token lacks the scope {str(need)!r} that this request needs; use a "
                f"token that has it (ripple tokens create NAME --scope {need})",
                slug="forbidden",
            )


def _template(request: Request) -> str:
    """The matched route's path template with the `/v1` prefix it is included under (FastAPI
    may hand dependencies the route as its router declared it, without the prefix)."""
    route = request.scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    if path is None:
        return str(request.scope["path"])
    template = str(path)
    if str(request.scope["path"]).startswith("/v1/") and not template.startswith("/v1/"):
        template = "/v1" + template
    return template


#: Routes whose need is not the default (`read` for GET/HEAD, `operate` otherwise), by method
#: and path template. A value of None means "the path parameter of that name".
_ADMIN: Final = "admin"
_QUEUE_ROUTES: Final = (
    ("POST", "/v1/queues/{queue}/messages"),
    ("POST", "/v1/queues/{queue}/messages/receive"),
    ("DELETE", "/v1/queues/{queue}/messages/{receipt}"),
    ("POST", "/v1/queues/{queue}/messages/{receipt}/nack"),
)


def need_of(method: str, template: str, params: dict[str, str]) -> Need:
    """The scope a request needs, from its method, route template and path parameters.

    - `/v1/tokens*` and `/v1/audit*`: `admin`;
    - publish (`POST /v1/topics/{topic}/events`): `publish:<topic>`; CloudEvents
      (`POST /v1/events`): `publish:<type>` (the value is filled in from the body);
    - start (`POST /v1/workflows/{name}/runs`): `start:<name>`;
    - signal a run: `signal:<workflow>` (`operate` grants it too); `POST /v1/signals`
      (signal every matching run) needs `signal:*`;
    - queue send, receive, ack, nack: `queue:<queue>`;
    - any other GET or HEAD: `read`; any other method: `operate`.
    """
    if template.startswith(("/v1/tokens", "/v1/audit")):
        return Need("admin")
    if method == "POST":
        if template == "/v1/topics/{topic}/events":
            return Need("publish", params.get("topic", ""))
        if template == "/v1/events":
            return Need("publish")
        if template == "/v1/workflows/{name}/runs":
            return Need("start", params.get("name", ""))
        if template == "/v1/workflows/{name}/runs/{run_id}/signals/{signal}":
            return Need("signal", params.get("name", ""))
        if template == "/v1/runs/{run_id}/signals/{signal}":
            return Need("signal")
        if template == "/v1/signals":
            return Need("signal", "*")
    if (method, template) in _QUEUE_ROUTES:
        return Need("queue", params.get("queue", ""))
    if method in ("GET", "HEAD"):
        return Need("read")
    return Need("operate")


async def _cloudevent_topics(request: Request) -> list[str]:
    """The topics (`type`s) a CloudEvents request publishes to: the `ce-type` header (binary
    mode), else each event's `type` in the body. A body that cannot be read needs `publish:#`
    (the route then refuses it)."""
    ce_type = request.headers.get("ce-type")
    if ce_type is not None:
        return [ce_type]
    try:
        body = json.loads(await request.body())
    except (ValueError, RecursionError):
        return ["#"]
    events = body if isinstance(body, list) else [body]
    # A `type` may be any JSON value here (the route refuses what is not a string): collect
    # them in a list, as a set cannot hold an object or an array.
    types = [event.get("type") for event in events if isinstance(event, dict)]
    if not types or not all(isinstance(topic, str) for topic in types):
        return ["#"]
    return sorted({str(topic) for topic in types})
