"""The audit trail's SQL (`ripple_audit`, migration 0018). Every function takes a connection:
an action records its audit row in its own transaction, so the two commit or fail together."""

from __future__ import annotations

from typing import Any, Final

from ripple.platform.access.actors import current_actor
from ripple.platform.core.db import Connection
from ripple.platform.core.ids import uuid7

__all__ = ["record"]

_INSERT: Final = """
INSERT INTO ripple_audit (id, actor, token_id, action, target, request_id, details)
VALUES ($1, $2, $3, $4, $5, $6, $7)
"""


async def record(
    conn: Connection,
    action: str,
    target: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Write one audit row for `action` on `target`, as the current actor, on `conn`.

    Call it inside the action's transaction: a failing insert rolls the action back.
    """
    actor = current_actor()
    await conn.execute(
        _INSERT,
        uuid7(),
        actor.name,
        actor.token_id,
        action,
        target,
        actor.request_id,
        details or {},
    )
