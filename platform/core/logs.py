"""How Ripple logs: library loggers that stay silent until the application configures logging,
the process configuration of `ripple serve/worker/dev`, and limits on repeated warnings.

Library code logs through `get_logger()`, never `structlog.get_logger()` directly: structlog
left unconfigured prints every line (debug included) to stdout, which a library must not do to
the process that imports it. Such a logger goes to structlog once the application configured
structlog, and to the stdlib logger of the same name otherwise (silent unless the application
configured stdlib logging: the `ripple` logger has a `NullHandler`).

structlog itself is imported when a library logger first logs (or logging is configured), not
when a module creates its logger: a one-shot command that logs nothing never imports it.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import structlog

__all__ = [
    "REPEAT_WINDOW",
    "Outage",
    "Repeats",
    "configure_logging",
    "configure_plain_logging",
    "get_logger",
]

_configured = False

#: Seconds during which repeats of a warning are counted instead of logged.
REPEAT_WINDOW: Final = 60.0

# A library attaches a NullHandler to its top logger: records nobody configured a handler for
# are dropped instead of reaching stdlib's last-resort handler (stderr).
logging.getLogger("ripple").addHandler(logging.NullHandler())


def _to_stdlib(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The last processor on the stdlib path: one message, `event key=value ...`, and the
    exception info left to the application's handler to format."""
    kwargs = {k: event_dict.pop(k) for k in ("exc_info", "stack_info") if event_dict.get(k)}
    event = event_dict.pop("event", "")
    fields = " ".join(f"{key}={value!r}" for key, value in event_dict.items())
    return ((f"{event} {fields}" if fields else str(event),), kwargs)


class _LibraryLogger:
    """A logger that follows the application's choice: structlog once structlog is configured,
    else the stdlib logger `name` (whose level is checked before anything is rendered)."""

    __slots__ = ("_name", "_stdlib", "_structlog")

    def __init__(self, name: str) -> None:
        self._name = name
        self._structlog: Any = None
        self._stdlib: Any = None

    def _target(self) -> Any:
        import structlog

        if self._structlog is None:
            # A lazy proxy: it picks up structlog's configuration when it is first used.
            self._structlog = structlog.get_logger(self._name)
            self._stdlib = structlog.wrap_logger(
                logging.getLogger(self._name),
                processors=[
                    structlog.stdlib.filter_by_level,
                    structlog.contextvars.merge_contextvars,
                    _to_stdlib,
                ],
                wrapper_class=structlog.stdlib.BoundLogger,
                cache_logger_on_first_use=True,
            )
        return self._structlog if structlog.is_configured() else self._stdlib

    def debug(self, event: str, **kw: Any) -> None:
        self._target().debug(event, **kw)

    def info(self, event: str, **kw: Any) -> None:
        self._target().info(event, **kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._target().warning(event, **kw)

    def error(self, event: str, **kw: Any) -> None:
        self._target().error(event, **kw)

    def exception(self, event: str, **kw: Any) -> None:
        self._target().exception(event, **kw)

    def is_enabled_for(self, level: int) -> bool:
        return bool(self._target().is_enabled_for(level))


def get_logger(name: str) -> Any:
    """The logger of library module `name` (`ripple.<area>`): structlog's methods (`debug`,
    `info`, `warning`, `error`, `exception`, `is_enabled_for`) with an event and fields, quiet
    until the application configures structlog or stdlib logging."""
    return _LibraryLogger(name)


def configure_logging(*, console: bool = False, level: str = "info", force: bool = False) -> None:
    """Configure structlog and stdlib logging (what `ripple serve/worker/dev` do for
    themselves; an application embedding the client configures its own). Idempotent unless
    `force`."""
    import structlog

    global _configured
    if _configured and not force:
        return
    _configured = True
    numeric = logging.getLevelName(level.upper())
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if console
        else structlog.processors.JSONRenderer()
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(level=max(numeric, logging.WARNING), stream=sys.stderr, force=True)


def configure_plain_logging(level: str = "warning") -> None:
    """Configure stdlib logging only, to stderr at `level`: what a one-shot command (a `ripple`
    operator command) needs. Library loggers then write `LEVEL:logger:event key=value` lines
    through stdlib, and structlog is imported only if one of them logs."""
    logging.basicConfig(level=logging.getLevelName(level.upper()), stream=sys.stderr)


def _error_text(exc: BaseException | None) -> str:
    return "unknown" if exc is None else f"{type(exc).__name__}: {exc}"


class Repeats:
    """Warnings that may repeat without end (a driver's reconnect failures): per event, one
    line, then at most one per `window` seconds with `repeats_since_last`, the ones not logged.
    """

    def __init__(self, log: Any, *, window: float = REPEAT_WINDOW) -> None:
        self._log = log
        self._window = window
        self._last: dict[str, float] = {}
        self._count: dict[str, int] = {}

    def warn(self, event: str, exc: BaseException | None) -> None:
        now = time.monotonic()
        last = self._last.get(event)
        if last is not None and now - last < self._window:
            self._count[event] = self._count.get(event, 0) + 1
            return
        self._last[event] = now
        repeats = self._count.pop(event, 0)
        self._log.warning(event, error=_error_text(exc), repeats_since_last=repeats)


class Outage:
    """The log of one kind of failure that lasts (a database or Redis outage) and ends when
    the caller sees a success: one warning at the first failure, repeats counted (a reminder
    with the count at most once per `window` while it lasts), and one info line at the end
    with the count and the duration.

    `failed()` logs `event` (warning: `error`, the caller's fields, and on a reminder
    `failures` and `duration_s`); `recovered()` logs `recovered_event` (info: `failures`,
    `duration_s`) if an outage was open, and costs one attribute test otherwise.
    """

    def __init__(
        self,
        log: Any,
        event: str,
        recovered_event: str,
        *,
        window: float = REPEAT_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._event = event
        self._recovered_event = recovered_event
        self._window = window
        self._clock = clock
        #: When the open outage began (None: no outage), its failures, the last warning.
        self._since: float | None = None
        self.failures = 0
        self._warned = 0.0

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def failed(self, exc: BaseException | None = None, **fields: Any) -> None:
        now = self._clock()
        self.failures += 1
        if self._since is None:
            self._since = self._warned = now
            self._log.warning(self._event, error=_error_text(exc), **fields)
        elif now - self._warned >= self._window:
            self._warned = now
            self._log.warning(
                self._event,
                error=_error_text(exc),
                failures=self.failures,
                duration_s=round(now - self._since, 1),
                **fields,
            )

    def recovered(self) -> None:
        if self._since is None:
            return
        duration = self._clock() - self._since
        failures, self._since, self.failures = self.failures, None, 0
        self._log.info(self._recovered_event, failures=failures, duration_s=round(duration, 1))
