"""How operator commands reach Ripple: always through the REST API, one path per action.

With `--api URL` the request goes to that server. Without it, the CLI serves the same app in its
own process on the database and sends the request through `httpx.ASGITransport`. That process
lives for one command, so it builds only what the command needs: the route modules it calls
(not the dashboard or `/metrics`), a pool of one connection, and, for commands that only read,
no Redis connection (wake hints are only sent after writes). Migrations are checked as by every
process (one query when the schema is current).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ripple.platform.cli.options import Remote
from ripple.platform.cli.output import fail

if TYPE_CHECKING:
    from ripple.platform.api.operator import ApiOperator
    from ripple.platform.core.config import Settings

__all__ = ["operate", "settings"]

T = TypeVar("T")


def settings(**overrides: Any) -> Settings:
    """The settings from the environment; a bad one exits 2 with the message."""
    from ripple.platform.core.config import load_settings
    from ripple.platform.errors import ConfigError

    try:
        return load_settings(**overrides)
    except ConfigError as exc:
        raise fail(exc.message, 2) from None


def operate(
    remote: Remote,
    action: Callable[[ApiOperator], Awaitable[T]],
    *,
    routes: Sequence[str],
    writes: bool = True,
) -> T:
    """Run `action` over HTTP: against `remote.api`, or against the app served in this process
    on the database with the `/v1` route modules `routes` (names in `ripple.platform.api`).
    `writes=False` declares that the action only reads. Failures exit 1 with the message."""
    import asyncio
    import gc

    # One request, then the process exits: no cyclic garbage collection meanwhile, whose
    # passes over the objects the imports below create would cost more than they free.
    gc.disable()
    from ripple.platform.api.operator import ApiOperator, OperatorError
    from ripple.platform.errors import RippleError

    async def go() -> T:
        if remote.api:
            async with ApiOperator(remote.api, remote.token) as api:
                return await action(api)
        return await _in_process(action, routes, writes)

    try:
        return asyncio.run(go())
    except (OperatorError, RippleError) as exc:
        raise fail(str(exc)) from None


async def _in_process(
    action: Callable[[ApiOperator], Awaitable[T]], routes: Sequence[str], writes: bool
) -> T:
    import httpx

    from ripple.platform.api.app import create_app
    from ripple.platform.api.operator import ApiOperator
    from ripple.platform.client import Client
    from ripple.platform.core.logs import configure_logging

    configure_logging(level="warning")
    client = Client(settings=settings())
    # One request at a time: one connection (the pool opens more only if a route needs them).
    lean: dict[str, Any] = {"pool_min_size": 1}
    if not writes:
        lean["redis_url"] = None  # no hint to send: no Redis connection, no redis import
    client.settings = client.settings.model_copy(update=lean)
    async with client:
        tokens = client.settings.api_tokens
        transport = httpx.ASGITransport(app=create_app(client, routes=routes))
        async with ApiOperator(
            "http://ripple.local", tokens[0] if tokens else None, transport=transport
        ) as local:
            return await action(local)
