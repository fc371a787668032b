"""Figures of the chaos battery: each test records one line, `make chaos` prints them as one
table at the end (`pytest_terminal_summary` in tests/chaos/conftest.py).

Columns every test fills where it applies: `lost`, `duplicated`, `recovery` (p50/max seconds
from the end of the fault until the work was done again), `during_outage` (status histogram, or
the client's outcomes, while the fault lasted); everything else goes to `other`.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

__all__ = ["COLUMNS", "FIGURES", "p50_max", "record", "table"]

#: (test name, figures) in the order the tests ran.
FIGURES: list[tuple[str, dict[str, Any]]] = []
COLUMNS = ("lost", "duplicated", "recovery", "during_outage")


def p50_max(seconds: Sequence[float]) -> str:
    """`p50/max` of durations in seconds, for the recovery column."""
    if not seconds:
        return "-"
    return f"{statistics.median(seconds):.2f}/{max(seconds):.2f}s"


def record(name: str, **figures: Any) -> None:
    """Print the test's figures (shown with `pytest -s`) and keep them for the summary table."""
    FIGURES.append((name, figures))
    print(f"chaos {name}: " + ", ".join(f"{k}={v}" for k, v in figures.items()))


def table() -> list[str]:
    """The recorded figures as the lines of a plain-text table."""
    header = ("test", *COLUMNS, "other")
    rows = [header]
    for name, figures in FIGURES:
        other = ", ".join(f"{k}={v}" for k, v in figures.items() if k not in COLUMNS)
        rows.append((name, *(str(figures.get(c, "-")) for c in COLUMNS), other))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = []
    for n, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append(" | ".join([*cells, row[-1]]))
        if n == 0:
            lines.append("-+-".join("-" * w for w in widths) + "-+-" + "-" * 20)
    return lines
