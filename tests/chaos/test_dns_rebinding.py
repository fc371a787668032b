"""DNS rebinding against the webhook dispatcher: the name's answer flips, with every lookup,
between an admitted address and loopback (a TTL-0 rebinding attacker). Each connection must go
to the address its own lookup returned and the SSRF check admitted, or be refused: never to
loopback. Validation and connection use one resolution, so lookups == connections (attempts),
not twice that.

The resolver is the dispatcher's `resolver=` seam (`subscribers/webhooks/ssrf.py` Resolver, used by
`subscribers/webhooks/transport.py` GuardedResolver for every new connection). The admitted
("public")
address is 127.0.0.2, admitted by RIPPLE_WEBHOOK_ALLOWED_NETWORKS=127.0.0.2/32, so the test can
see the request arrive there without sending anything to the internet; the attacker's target is
127.0.0.1 on the same port, refused as loopback.
"""

from __future__ import annotations

from collections import Counter

import pytest
from structlog.testing import capture_logs

from ripple.platform.client import Client
from ripple.platform.core.wake import NullWaker
from ripple.subscribers import WebhookTarget
from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher
from ripple.workflows import RetryPolicy
from tests.chaos.conftest import FULL
from tests.chaos.figures import record
from tests.chaos.receivers import AbusiveReceiver

pytestmark = pytest.mark.timeout(240 if FULL else 60)

HOST = "rebind.test"
ADMITTED, LOOPBACK = "127.0.0.2", "127.0.0.1"
EVENTS = 40 if FULL else 12


class RebindingResolver:
    """Answers ADMITTED on odd lookups and LOOPBACK on even ones; counts them."""

    def __init__(self) -> None:
        self.answers: Counter[str] = Counter()

    async def resolve(self, host: str, port: int) -> list[str]:
        assert host == HOST
        answer = ADMITTED if self.answers.total() % 2 == 0 else LOOPBACK
        self.answers[answer] += 1
        return [answer]


async def test_dns_rebinding__connections_go_to_the_checked_address_never_loopback(
    chaos_client: Client,
) -> None:
    admitted = await AbusiveReceiver(ADMITTED).start()
    attacker = await AbusiveReceiver(LOOPBACK).start(port=admitted.port)
    resolver = RebindingResolver()
    settings = chaos_client.settings.model_copy(
        update={
            "webhook_allowed_networks": [f"{ADMITTED}/32"],
            "webhook_concurrency": 4,
            # half the attempts are refused: the circuit breaker must not hold the rest back
            "webhook_circuit_failures": 1000,
        }
    )
    try:
        # The subscription itself is accepted: `rebind.test` does not resolve for the client.
        url = f"http://{HOST}:{admitted.port}/close"  # each response closes its connection
        sub = await chaos_client.subscribe(
            "rebind.hit", WebhookTarget(url, retry=RetryPolicy(max_attempts=1))
        )
        for n in range(EVENTS):
            await chaos_client.publish("rebind.hit", {"n": n})
        dispatcher = WebhookDispatcher(chaos_client.pool, NullWaker(), settings, resolver=resolver)
        with capture_logs() as logs:  # one warning per refused delivery, kept off the output
            attempts = await dispatcher.run_until_idle()
    finally:
        await admitted.close()
        await attacker.close()

    rows = await chaos_client.pool.fetch(
        "SELECT d.status, a.error FROM ripple_webhook_attempts a "
        "JOIN ripple_webhook_deliveries d ON d.id = a.delivery_id WHERE d.subscription_id = $1",
        sub.id,
    )
    statuses = Counter(row["status"] for row in rows)
    refused = [row["error"] for row in rows if row["status"] == "failed"]
    assert attempts == EVENTS == len(rows)
    assert attacker.requests.total() == 0  # nothing ever reached loopback
    # one lookup per connection, and each connection went where its lookup pointed
    assert resolver.answers.total() == EVENTS
    assert admitted.requests["/close"] == resolver.answers[ADMITTED] == statuses["delivered"]
    assert len(refused) == resolver.answers[LOOPBACK]
    assert all(e.startswith("BlockedAddress") and "loopback" in e for e in refused), refused
    warned = [e for e in logs if e["event"] == "webhook_delivery_failed"]
    assert len(warned) == len(refused)
    record(
        "dns-rebinding",
        lost=0,
        duplicated=0,
        during_outage=dict(statuses),
        lookups=dict(resolver.answers),
        to_admitted=admitted.requests["/close"],
        to_loopback=attacker.requests.total(),
    )
