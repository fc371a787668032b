"""`Registry`: the workflow definitions this process knows, and storing their flow-control
options so every process creating their runs applies them."""

from __future__ import annotations

from typing import Any

from ripple.platform.core.db import Pool, map_errors, transaction
from ripple.workflows import store
from ripple.workflows.authoring.definition import WorkflowDefinition

__all__ = ["Registry"]


class Registry:
    """Definitions by name (the newest version registered wins)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        #: Definitions seen by this process (start by name validates when known).
        self.definitions: dict[str, WorkflowDefinition[Any, Any]] = {}
        #: Definitions whose flow-control options are not yet stored (`sync_definitions`).
        self._unsynced: dict[str, WorkflowDefinition[Any, Any]] = {}

    def register(self, *definitions: WorkflowDefinition[Any, Any]) -> None:
        """Make definitions known, so starts by name validate their input (their flow-control
        options are stored before this process's next start, or by `sync_definitions`)."""
        for definition in definitions:
            current = self.definitions.get(definition.name)
            if current is None or current.version <= definition.version:
                if current is not definition:
                    self._unsynced[definition.name] = definition
                self.definitions[definition.name] = definition

    @property
    def needs_sync(self) -> bool:
        """Definitions were registered whose flow-control options are not stored yet (a start
        checks this before it awaits `sync_definitions`)."""
        return bool(self._unsynced)

    async def sync_definitions(self) -> None:
        """Store the flow-control options of the definitions registered since the last call,
        so every process creating their runs applies them (a worker does this at start)."""
        if not self._unsynced:
            return
        pending = dict(self._unsynced)
        rows = [(name, d.flow_control) for name, d in pending.items()]
        with map_errors():
            async with transaction(self.pool) as conn:
                await store.sync_flow_controls(conn, rows=rows)
        for name, definition in pending.items():
            if self._unsynced.get(name) is definition:
                del self._unsynced[name]

    def resolve(self, name: str) -> WorkflowDefinition[Any, Any] | None:
        return self.definitions.get(name)
