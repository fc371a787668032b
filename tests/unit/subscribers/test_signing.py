"""Standard Webhooks signatures, checked with the `standardwebhooks` reference library."""

from __future__ import annotations

import base64
import json
import re
import string
import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from ripple.subscribers.targets import WebhookTarget
from ripple.subscribers.webhooks.sending import message_body, signing_secrets
from ripple.subscribers.webhooks.signing import (
    SECRET_PATTERN,
    decode_secret,
    generate_secret,
    sign,
    signature_header,
)

# The reference library's published test vector.
VECTOR_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VECTOR_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
VECTOR_TS = 1614265330
VECTOR_BODY = b'{"test": 2432232314}'
VECTOR_SIG = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def test_sign__matches_published_test_vector() -> None:
    assert sign(VECTOR_ID, VECTOR_TS, VECTOR_BODY, VECTOR_SECRET) == VECTOR_SIG


def test_sign__matches_reference_library_sign() -> None:
    ref = Webhook(VECTOR_SECRET).sign(
        VECTOR_ID, datetime.fromtimestamp(VECTOR_TS, UTC), VECTOR_BODY.decode()
    )
    assert sign(VECTOR_ID, VECTOR_TS, VECTOR_BODY, VECTOR_SECRET) == ref


def test_sign__verifies_with_reference_library() -> None:
    secret = generate_secret()
    body = message_body("user.signup", datetime.now(UTC), json.dumps({"userId": 42, "name": "Zoë"}))
    ts = int(time.time())
    headers = {
        "webhook-id": "msg_abc",
        "webhook-timestamp": str(ts),
        "webhook-signature": signature_header("msg_abc", ts, body, [secret]),
    }
    assert Webhook(secret).verify(body, headers)["data"] == {"userId": 42, "name": "Zoë"}
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(body, headers)


def test_signature_header__rotation_carries_both_signatures() -> None:
    old, new = generate_secret(), generate_secret()
    body = b'{"type":"a","timestamp":"2024-01-01T00:00:00+00:00","data":{}}'
    ts = int(time.time())
    header = signature_header("msg_1", ts, body, [new, old])
    assert len(header.split(" ")) == 2
    headers = {"webhook-id": "msg_1", "webhook-timestamp": str(ts), "webhook-signature": header}
    Webhook(new).verify(body, headers)
    Webhook(old).verify(body, headers)


def test_signing_secrets__previous_secret_only_during_overlap() -> None:
    now = datetime.now(UTC)
    target = {
        "secret": "whsec_bmV3bmV3bmV3bmV3bmV3",
        "previousSecret": "whsec_b2xkb2xkb2xkb2xkb2xk",
        "previousSecretExpiresAt": (now + timedelta(hours=1)).isoformat(),
    }
    assert signing_secrets(target, now) == [target["secret"], target["previousSecret"]]
    assert signing_secrets(target, now + timedelta(hours=2)) == [target["secret"]]
    assert signing_secrets({"secret": target["secret"]}, now) == [target["secret"]]


def test_decode_secret__rejects_non_base64_and_accepts_unpadded() -> None:
    with pytest.raises(ValueError, match="whsec_"):
        decode_secret("whsec_not base64!!")
    assert decode_secret("whsec_YWJjZGVmZ2hpamtsbQ==") == b"abcdefghijklm"
    assert decode_secret("whsec_YWJjZGVmZ2hpamtsbQ") == b"abcdefghijklm"


def test_one_secret_rule_for_targets_and_signing() -> None:
    """`WebhookTarget` accepts exactly the secrets signing accepts (it used to require the
    prefix and 16 characters but not base64, while signing took any base64 key)."""
    cases = {
        "whsec_YWJjZGVmZ2hpamts": True,  # 12 bytes
        "YWJjZGVmZ2hpamts": True,  # the prefix is optional, as in the reference library
        "whsec_YWJjZGVmZ2hpams": False,  # 11 bytes
        "whsec_YWJj": False,
        "whsec_!!!!!!!!!!!!!!!!!!!!": False,  # long enough, not base64
        "whsec_": False,
    }
    for secret, accepted in cases.items():
        try:
            decode_secret(secret)
            signs = True
        except ValueError:
            signs = False
        try:
            WebhookTarget("https://example.com/hook", secret=secret)
            targets = True
        except ValueError:
            targets = False
        assert signs == targets == accepted, secret


def test_message_body__shape_is_type_timestamp_data() -> None:
    when = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert message_body("a.b", when, "[1]") == (
        b'{"type":"a.b","timestamp":"2024-05-01T12:00:00+00:00","data":[1]}'
    )


def test_message_body__splices_stored_payload_text_unchanged() -> None:
    # The payload is the stored JSON text (Postgres jsonb output), not re-encoded.
    when = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    body = message_body('ü."q"', when, '{"n": 1, "name": "Zoë"}')
    assert (
        body
        == (
            '{"type":"ü.\\"q\\"","timestamp":"2024-05-01T12:00:00+00:00",'
            '"data":{"n": 1, "name": "Zoë"}}'
        ).encode()
    )
    assert json.loads(body)["data"] == {"n": 1, "name": "Zoë"}


_SECRET_TEXT = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + "+/=_", max_size=30),
    st.binary(max_size=30).map(lambda b: base64.b64encode(b).decode()),
)


@settings(max_examples=500, derandomize=True, database=None)
@given(prefix=st.sampled_from(["", "whsec_", "whsec_whsec_"]), raw=_SECRET_TEXT)
def test_secret_pattern__accepts_exactly_what_decode_secret_accepts(prefix: str, raw: str) -> None:
    secret = prefix + raw
    try:
        decode_secret(secret)
        accepted = True
    except ValueError:
        accepted = False
    assert (re.fullmatch(SECRET_PATTERN.strip("^$"), secret) is not None) is accepted, secret


def test_message_body__carries_the_schema_version_of_a_validated_event() -> None:
    when = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    body = json.loads(message_body("a.b", when, '{"n": 1}', 3))
    assert body == {
        "type": "a.b",
        "timestamp": "2024-05-01T12:00:00+00:00",
        "data": {"n": 1},
        "schemaVersion": 3,
    }
    assert "schemaVersion" not in json.loads(message_body("a.b", when, '{"n": 1}'))
