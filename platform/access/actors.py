"""The principal an action is taken for, carried in a context variable.

The API's auth dependency sets it from the request's token; everything else (the Python
`Client`, the CLI on the database, workers) acts as the default `PYTHON` actor. Audit rows
read it inside the action's own transaction, so no signature carries it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["PYTHON", "Actor", "acting_as", "current_actor"]


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: a stored token (`token_id` set), `env` (a RIPPLE_API_TOKENS token) or `python`.

    `request_id` ties audit rows to the HTTP request that caused them (None outside one).
    """

    name: str
    token_id: str | None = None
    request_id: str | None = None


PYTHON = Actor(name="python")
_current: ContextVar[Actor] = ContextVar("ripple_actor", default=PYTHON)


def current_actor() -> Actor:
    """The actor of the running task (`PYTHON` unless an API request set one)."""
    return _current.get()


@contextmanager
def acting_as(actor: Actor) -> Iterator[Actor]:
    """Run the enclosed code as `actor`, restoring the previous one after."""
    token = _current.set(actor)
    try:
        yield actor
    finally:
        _current.reset(token)
