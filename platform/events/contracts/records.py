"""The public records of topic schemas; pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, get_args

__all__ = ["COMPATIBILITY_MODES", "Compatibility", "CompatibilityReport", "SchemaVersion"]

Compatibility = Literal[
    "backward",
    "forward",
    "full",
    "none",
    "backward_transitive",
    "forward_transitive",
    "full_transitive",
]
#: Every compatibility mode, the default first.
COMPATIBILITY_MODES: Final[tuple[Compatibility, ...]] = get_args(Compatibility)


@dataclass(frozen=True, slots=True)
class SchemaVersion:
    """One registered version of a topic's payload schema (JSON Schema 2020-12)."""

    topic: str
    version: int
    schema: dict[str, Any]
    compatibility: Compatibility
    created_at: datetime


@dataclass(frozen=True, slots=True)
class CompatibilityReport:
    """Whether a schema may follow a topic's versions under its mode, and why not."""

    compatible: bool
    problems: list[str] = field(default_factory=list)
