"""The audit trail's REST answer shapes, shared with the CLI (no FastAPI import)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from ripple.platform.access.audit import AuditPage
from ripple.platform.api.models import OutModel, jsonable

__all__ = ["AuditEntryOut", "AuditPageOut", "audit_page_out"]


class AuditEntryOut(OutModel):
    id: str = Field(description="The entry's id (time-ordered).")
    at: datetime
    actor: str = Field(
        examples=["env"],
        description="The token's name; `env` for a RIPPLE_API_TOKENS token, `python` for an "
        "in-process Client.",
    )
    token_id: str | None = Field(default=None, description="The stored token's id, if any.")
    action: str = Field(examples=["run.cancel"])
    target: str | None = Field(default=None, description="The id acted on.")
    request_id: str | None = Field(default=None, description="The HTTP request's id.")
    details: dict[str, Any] = Field(
        default_factory=dict, description="What else the action recorded (a bulk filter, count)."
    )


class AuditPageOut(OutModel):
    items: list[AuditEntryOut]
    next_cursor: str | None = None


def audit_page_out(page: AuditPage) -> AuditPageOut:
    return AuditPageOut.model_validate(jsonable(page))
