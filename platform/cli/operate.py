"""How operator commands reach Ripple: on the database through a `Client`, or over HTTP.

Without `--api`, an operator command connects a `Client` for itself (`Client.for_command`: a
pool of one connection, no Redis when it only reads) and calls the `Client` method its REST
route calls (`direct.py`); pending migrations are applied first, as by every process (one query
when the schema is current), so no command runs against an older schema. With `--api URL` the
request goes to that server (`remote.py`). Both answer the REST API's JSON shapes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from ripple.platform.cli.options import Remote
from ripple.platform.cli.output import fail

if TYPE_CHECKING:
    from ripple.platform.cli.direct import ClientOperator
    from ripple.platform.cli.remote import ApiOperator
    from ripple.platform.core.config import Settings

    #: What an action is given: the same methods on the database or over HTTP.
    Operator: TypeAlias = ApiOperator | ClientOperator

__all__ = ["OperatorError", "operate", "settings"]

T = TypeVar("T")


class OperatorError(Exception):
    """An operator command failed; the message says why."""


def settings(**overrides: Any) -> Settings:
    """The settings from the environment; a bad one exits 2 with the message."""
    from ripple.platform.core.config import load_settings
    from ripple.platform.errors import ConfigError

    try:
        return load_settings(**overrides)
    except ConfigError as exc:
        raise fail(exc.message, 2) from None


def operate(
    remote: Remote, action: Callable[[Operator], Awaitable[T]], *, writes: bool = True
) -> T:
    """Run `action` against `remote.api` over HTTP, or on the database through a `Client`.
    `writes=False` declares that the action only reads. Failures exit 1 with the message."""
    import asyncio
    import gc
    import os

    # One action, then the process exits: no cyclic garbage collection meanwhile, whose
    # passes over the objects the imports below create would cost more than they free.
    gc.disable()
    # Looking for pydantic plugins reads the metadata of every installed package, and a
    # command's models need none (an explicit PYDANTIC_DISABLE_PLUGINS is kept).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from ripple.platform.errors import RippleError

    async def go() -> T:
        if remote.api:
            from ripple.platform.cli.remote import ApiOperator

            async with ApiOperator(remote.api, remote.token) as api:
                return await action(api)
        return await _direct(action, writes)

    try:
        return asyncio.run(go())
    except (OperatorError, RippleError) as exc:
        raise fail(str(exc)) from None


async def _direct(action: Callable[[Operator], Awaitable[T]], writes: bool) -> T:
    from ripple.platform.cli.direct import ClientOperator
    from ripple.platform.client import Client
    from ripple.platform.core.logs import configure_plain_logging
    from ripple.workflows.errors import WorkflowError

    configure_plain_logging("warning")
    async with Client.for_command(settings=settings(), writes=writes) as client:
        try:
            return await action(ClientOperator(client))
        except WorkflowError as exc:
            raise fail(str(exc)) from None
