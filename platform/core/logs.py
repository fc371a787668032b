"""structlog configuration, done once per process: JSON lines, or a console renderer in dev."""

from __future__ import annotations

import logging
import sys

import structlog

__all__ = ["configure_logging"]

_configured = False


def configure_logging(*, console: bool = False, level: str = "info", force: bool = False) -> None:
    """Configure structlog and stdlib logging. Idempotent unless `force`."""
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
