"""Approvals: what `ctx.step.wait_for_approval` returns, and the signed tokens of approval
links. Pure: HMAC over the run id and the approval's step, no I/O.

A token is `base64url(run_id "/" step) "." base64url(HMAC-SHA256(key, that))`. It names one
approval of one run; whether it is still pending, expired or used is the database's
answer, so a token is single-use and expires with its approval's row, not by its text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

__all__ = ["APPROVAL_PREFIX", "Approval", "approval_url", "sign_token", "verify_token"]

#: Journal keys and wait names of approvals: `approval:<step>`.
APPROVAL_PREFIX: Final = "approval:"


@dataclass(frozen=True, slots=True)
class Approval:
    """A person's decision on a step (`ctx.step.wait_for_approval`).

    `by` is None when the approval timed out (then `approved` is False).
    """

    approved: bool
    by: str | None
    comment: str | None
    at: datetime

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Approval:
        return cls(
            approved=bool(payload.get("approved")),
            by=payload.get("by"),
            comment=payload.get("comment"),
            at=datetime.fromisoformat(str(payload["at"])),
        )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_token(key: bytes, run_id: str, step: str) -> str:
    """The token of approval `step` of run `run_id`."""
    body = f"{run_id}/{step}".encode()
    mac = hmac.new(key, body, hashlib.sha256).digest()
    return f"{_b64(body)}.{_b64(mac)}"


def verify_token(key: bytes, token: str) -> tuple[str, str] | None:
    """(run_id, step) of a token this key signed; None for a forged or altered one (the MAC is
    compared in constant time)."""
    head, dot, tail = token.partition(".")
    if not dot or len(token) > 1024:
        return None
    try:
        body, mac = _unb64(head), _unb64(tail)
    except (binascii.Error, ValueError):
        return None
    expected = hmac.new(key, body, hashlib.sha256).digest()
    if not hmac.compare_digest(mac, expected):
        return None
    try:
        run_id, slash, step = body.decode().partition("/")
    except UnicodeDecodeError:
        return None
    return (run_id, step) if slash else None


def approval_url(public_url: str | None, key: bytes, run_id: str, step: str) -> str:
    """The link to the approval page of `step` of run `run_id`, on the API's `public_url`
    (None: relative to it)."""
    return f"{(public_url or '').rstrip('/')}/approve/{sign_token(key, run_id, step)}"
