"""Dashboard sessions and CSRF tokens: HMAC-signed, no server-side state.

A session cookie is `{expires}.{nonce}.{principal}.{signature}`: `principal` is who logged in
(`env` for a RIPPLE_API_TOKENS token, `local` without auth, else a stored token's id, whose
scopes and revocation are checked on every request). The CSRF token of a session is an HMAC of
its nonce, so every form of a session carries the same token and a forged cross-site POST (which
cannot read the page) cannot. With `RIPPLE_API_TOKENS` set the signing key derives from the
tokens (rotating them ends every session); without tokens the key is random per app and a
session is issued to anyone who loads a page (the server listens on loopback only then).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass
from typing import Final

__all__ = ["COOKIE", "SESSION_SECONDS", "Sessions"]

COOKIE: Final = "ripple_session"
#: How long a session lasts after login.
SESSION_SECONDS: Final = 12 * 3600


@dataclass(frozen=True, slots=True)
class Sessions:
    """Issues and checks session cookies and their CSRF tokens."""

    key: bytes

    @classmethod
    def for_tokens(cls, tokens: list[str]) -> Sessions:
        if not tokens:
            return cls(secrets.token_bytes(32))
        material = "\x00".join(sorted(tokens)).encode()
        return cls(hmac.new(b"ripple-ui-session", material, hashlib.sha256).digest())

    def _sign(self, text: str) -> str:
        return hmac.new(self.key, text.encode(), hashlib.sha256).hexdigest()

    def issue(self, principal: str = "local", now: float | None = None) -> str:
        """A new session cookie value for `principal` (`env`, `local` or a token id)."""
        if not principal or "." in principal:
            raise ValueError(f"a session principal has no dots: {principal!r}")
        expires = int((now or time.time()) + SESSION_SECONDS)
        body = f"{expires}.{secrets.token_urlsafe(16)}.{principal}"
        return f"{body}.{self._sign(body)}"

    def session(self, cookie: str | None, now: float | None = None) -> tuple[str, str] | None:
        """(nonce, principal) if `cookie` is a valid, unexpired session; else None."""
        if not cookie or cookie.count(".") != 3:
            return None
        expires, nonce, principal, signature = cookie.split(".")
        if not hmac.compare_digest(signature, self._sign(f"{expires}.{nonce}.{principal}")):
            return None
        if not expires.isdigit() or int(expires) < (now or time.time()):
            return None
        return nonce, principal

    def nonce(self, cookie: str | None, now: float | None = None) -> str | None:
        """The session's nonce if `cookie` is a valid, unexpired session; else None."""
        found = self.session(cookie, now)
        return None if found is None else found[0]

    def csrf(self, nonce: str) -> str:
        """The CSRF token every form of this session carries."""
        return self._sign(f"csrf:{nonce}")

    def csrf_valid(self, nonce: str, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented, self.csrf(nonce))
