"""Durations written as text (`7d`, `12h`, `30m`, `45s`, `2w`, plain seconds); no I/O and no
heavy import, so the CLI parses its options with it too."""

from __future__ import annotations

import re

__all__ = ["parse_duration"]

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_duration(text: str) -> float | None:
    """Seconds of `90d`, `12h`, `30m`, `45s`, `2w` or plain seconds; None if it is not one."""
    match = _DURATION.fullmatch(text)
    return None if match is None else float(match[1]) * _UNIT_SECONDS[match[2]]
