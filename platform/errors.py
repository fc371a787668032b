"""The error tree every Ripple module raises from; no I/O.

RippleError
├── ConfigError         a RIPPLE_* setting is missing or invalid
├── InvalidInput        bad names, sizes or JSON from a caller (carries `field`; also a ValueError)
├── SchemaIncompatible  a schema breaks its topic's compatibility rule (`problems`; a ValueError)
├── NotFound            the thing named does not exist
├── Conflict            a uniqueness or state rule refused the change
├── Gone                it existed but expired or ended (an approval link)
├── Unavailable         a dependency (Postgres) cannot be reached right now
└── StorageError        any other database failure (driver error chained as __cause__)
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "Conflict",
    "Gone",
    "InvalidInput",
    "NotFound",
    "RippleError",
    "SchemaIncompatible",
    "StorageError",
    "Unavailable",
]


class RippleError(Exception):
    """Ripple failed; the message says why and what to do."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (type(self).__doc__ or type(self).__name__).strip())

    @property
    def message(self) -> str:
        return str(self.args[0])


class ConfigError(RippleError):
    """Invalid configuration: fix the named RIPPLE_* environment variable."""


class InvalidInput(RippleError, ValueError):
    """The request is invalid; nothing was written.

    Also a `ValueError` (as pydantic's `ValidationError` is), so `except ValueError` catches a
    bad topic, pattern, workflow name or payload.
    """

    def __init__(self, message: str | None = None, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class SchemaIncompatible(RippleError, ValueError):
    """The schema breaks the topic's compatibility rule; nothing was registered.

    `problems` names each breaking change by its JSON pointer. Fix the schema, or change the
    topic's rule with `set_compatibility` (for example to "none").
    """

    def __init__(self, message: str | None = None, *, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems: list[str] = list(problems or [])


class NotFound(RippleError):
    """No such resource."""


class Conflict(RippleError):
    """The change conflicts with the current state; nothing was written."""

    def __init__(self, message: str | None = None, *, constraint: str | None = None) -> None:
        super().__init__(message)
        self.constraint = constraint


class Gone(RippleError):
    """The resource existed but is no longer usable (expired, or its run ended)."""


class Unavailable(RippleError):
    """Postgres cannot be reached; the outcome of the call is unknown, retry it."""


class StorageError(RippleError):
    """The database refused the operation."""
