"""Background services a worker process runs beside workflows (webhook dispatcher, sweeper)."""

from __future__ import annotations

from typing import Protocol

__all__ = ["BackgroundService"]


class BackgroundService(Protocol):
    """A long-running loop with cooperative shutdown."""

    name: str

    async def run(self) -> None:
        """Run until `stop()` is called, then finish or release in-flight work and return."""
        ...

    def stop(self) -> None:
        """Ask `run()` to return soon. Never blocks."""
        ...
