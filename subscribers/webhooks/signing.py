"""Standard Webhooks signing: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`; pure.

Owns the signature maths and secret parsing only; it does no I/O and knows no table. A secret is
`whsec_` followed by base64 key bytes (the prefix is optional on input). While a secret is being
rotated, a message carries one signature per valid secret, space-separated, and a receiver
accepts it if any of them verifies.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import os
from collections.abc import Iterable

__all__ = [
    "MIN_SECRET_BYTES",
    "SECRET_PATTERN",
    "SECRET_PREFIX",
    "decode_secret",
    "generate_secret",
    "sign",
    "signature_header",
]

SECRET_PREFIX = "whsec_"
#: Shortest HMAC key accepted (Standard Webhooks suggests 24 to 64 random bytes).
MIN_SECRET_BYTES = 12
#: What `decode_secret` accepts, as a regular expression for the OpenAPI document: the optional
#: prefix, then base64 (padding optional) of at least MIN_SECRET_BYTES bytes (four quads).
SECRET_PATTERN = (
    r"^(?:whsec_)?(?:[A-Za-z0-9+/]{4}){4,}(?:[A-Za-z0-9+/]{2}(?:==?)?|[A-Za-z0-9+/]{3}=?)?$"
)


def decode_secret(secret: str) -> bytes:
    """The HMAC key bytes of a `whsec_...` secret; ValueError if it is not base64 of at least
    `MIN_SECRET_BYTES` bytes.

    The one rule for webhook secrets: `WebhookTarget` and the webhook kind's validation both
    apply it, so a secret one accepts the other signs with.
    """
    raw = secret.removeprefix(SECRET_PREFIX)
    raw += "=" * (-len(raw) % 4)  # unpadded base64 is accepted, as the reference library does
    try:
        key = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(
            "webhook secret must be 'whsec_' followed by base64 bytes, e.g. from "
            "ripple.subscribers.webhooks.signing.generate_secret()"
        ) from exc
    if len(key) < MIN_SECRET_BYTES:
        raise ValueError(
            f"webhook secret has {len(key)} key bytes, fewer than {MIN_SECRET_BYTES}: use "
            "ripple.subscribers.webhooks.signing.generate_secret() (24 random bytes)"
        )
    return key


def generate_secret(nbytes: int = 24) -> str:
    """A new random secret in `whsec_` form."""
    return SECRET_PREFIX + base64.b64encode(os.urandom(nbytes)).decode("ascii")


@functools.lru_cache(maxsize=1024)
def _key(secret: str) -> bytes:
    """`decode_secret`, remembered: a dispatcher signs with the same few secrets all day."""
    return decode_secret(secret)


def sign(msg_id: str, timestamp: int, body: bytes, secret: str) -> str:
    """One `v1,<base64>` signature of `body` for message `msg_id` sent at `timestamp`."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.digest(_key(secret), signed, "sha256")  # one C call, no HMAC object
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_header(msg_id: str, timestamp: int, body: bytes, secrets: Iterable[str]) -> str:
    """The `webhook-signature` header value: one signature per secret, space-separated."""
    parts = [sign(msg_id, timestamp, body, secret) for secret in secrets]
    if not parts:
        raise ValueError("at least one secret is needed to sign a webhook")
    return " ".join(parts)
