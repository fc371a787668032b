"""`AttemptSender`: sending webhook attempts, one POST each.

It starts an attempt on a slot (`slots.py`) and sends it with Standard Webhooks headers
(`signing.py`) through the SSRF-guarded aiohttp session (`transport.py`, `ssrf.py`), whose
connections are capped overall and per origin (`webhook_origin_concurrency`), so many
subscriptions of one slow host cannot hold every connection. The whole exchange runs within the
attempt's timeout, enforced by one deadline sweeper for all attempts. The attempt's outcome
(`outcomes.py`) goes to the recorder (`recorder.py`); claiming is `claims.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

import aiohttp
import structlog

from ripple.platform.core.config import Settings
from ripple.platform.core.logs import get_logger
from ripple.platform.events import cloudevents
from ripple.platform.ops.tracing import recording, span
from ripple.subscribers.webhooks import delivery_store as store
from ripple.subscribers.webhooks.outcomes import Decision, decide, schedule_for
from ripple.subscribers.webhooks.recorder import OutcomeRecorder
from ripple.subscribers.webhooks.signing import signature_header
from ripple.subscribers.webhooks.slots import Slots
from ripple.subscribers.webhooks.ssrf import AddressPolicy, Resolver, check_literal_url
from ripple.subscribers.webhooks.transport import open_session

__all__ = ["DELIVERED", "AttemptSender", "message", "message_body", "signing_secrets"]

log = get_logger("ripple.webhooks")

#: Bytes of a response body kept with the attempt.
RESPONSE_HEAD: Final = 2048
#: Most bytes of a response body ever read (the rest is not downloaded).
RESPONSE_READ_CAP: Final = 64 * 1024
USER_AGENT: Final = "Ripple-Webhooks/0.1"
#: Seconds between checks for attempts past their timeout: one sweep cancels every overdue
#: attempt, instead of a loop timer armed and cancelled per attempt (`asyncio.timeout`). An
#: attempt's timeout fires up to this much late.
DEADLINE_SWEEP: Final = 0.05
#: Most URLs whose literal-address check passed are remembered (the policy never changes).
CHECKED_URLS: Final = 4096
#: The decision for a 2xx answer (`decide` returns the same).
DELIVERED: Final = Decision("delivered")


def message_body(
    topic: str, event_time: datetime, payload_json: str, schema_version: int | None = None
) -> bytes:
    """The POSTed JSON: `{"type": topic, "timestamp": ISO-8601, "data": payload}`, plus
    `"schemaVersion": n` when the event was validated against a topic schema.

    `payload_json` is the payload's JSON text as stored, spliced in without decoding it.
    """
    head = json.dumps(topic, ensure_ascii=False)
    stamp = event_time.astimezone(UTC).isoformat()
    tail = "" if schema_version is None else f',"schemaVersion":{int(schema_version)}'
    return f'{{"type":{head},"timestamp":"{stamp}","data":{payload_json}{tail}}}'.encode()


def message(delivery: store.ClaimedDelivery, source: str) -> tuple[bytes, dict[str, str]]:
    """The body and content headers of a delivery in its target's `format`: Ripple's own
    envelope (`message_body`), a structured CloudEvent, or a binary one (`ce-*` headers, body =
    the payload). The signature headers are added over exactly this body."""
    fmt = delivery.target.get("format", "ripple")
    if fmt == "cloudevents":
        body = cloudevents.structured_body(
            delivery.event_id,
            delivery.topic,
            delivery.event_time,
            delivery.payload_json,
            source,
            delivery.schema_version,
        )
        return body, {"content-type": cloudevents.STRUCTURED_MEDIA_TYPE}
    if fmt == "cloudevents-binary":
        headers = cloudevents.binary_headers(
            delivery.event_id, delivery.topic, delivery.event_time, source, delivery.schema_version
        )
        return delivery.payload_json.encode(), headers
    body = message_body(
        delivery.topic, delivery.event_time, delivery.payload_json, delivery.schema_version
    )
    return body, {"content-type": "application/json"}


def signing_secrets(target: Mapping[str, Any], now: datetime) -> list[str]:
    """The secrets to sign with: the current one, plus the previous one during its overlap."""
    secrets = [str(target["secret"])]
    previous, until = target.get("previousSecret"), target.get("previousSecretExpiresAt")
    if previous and until:
        with contextlib.suppress(ValueError, TypeError):
            if datetime.fromisoformat(str(until)) > now:
                secrets.append(str(previous))
    return secrets


def _error_text(exc: BaseException) -> str:
    detail = str(exc) or type(exc).__doc__ or ""
    return f"{type(exc).__name__}: {detail.strip().splitlines()[0] if detail.strip() else ''}"[:500]


async def _read_head(response: aiohttp.ClientResponse) -> str:
    """The start of the body; at most RESPONSE_READ_CAP bytes are read, the rest never is."""
    if response.content.at_eof():  # no body (204, Content-Length: 0) or already read
        return ""
    chunks: list[bytes] = []
    size = 0
    while size < RESPONSE_READ_CAP:
        chunk = await response.content.read(RESPONSE_READ_CAP - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    head = b"".join(chunks)[:RESPONSE_HEAD]
    return head.decode("utf-8", errors="replace").replace("\x00", "")


class AttemptSender:
    """Starts and sends attempts; each hands its outcome to the recorder.

    Args:
        settings: the default timeout, connection limits.
        slots: the slots attempts take.
        recorder: where finished attempts go.
        policy: the networks webhooks may reach.
        resolver: DNS seam for the SSRF check.
        rng: randomness for retry jitter.
    """

    def __init__(
        self,
        settings: Settings,
        slots: Slots,
        recorder: OutcomeRecorder,
        *,
        policy: AddressPolicy,
        resolver: Resolver,
        rng: random.Random,
    ) -> None:
        self._settings = settings
        self._slots = slots
        self._recorder = recorder
        self._policy = policy
        self._resolver = resolver
        self._rng = rng
        self._http: aiohttp.ClientSession | None = None
        #: the attempts in flight and the claim each holds, to release it if shutdown cancels
        #: the task
        self.claims: dict[asyncio.Task[None], store.ClaimedDelivery] = {}
        #: attempts started so far (what `run_until_idle` reports)
        self.started = 0
        self._checked_urls: set[str] = set()
        #: when each attempt in its exchange times out (monotonic), and those the deadline
        #: sweeper cancelled for it (`_sweep_deadlines`)
        self._deadlines: dict[asyncio.Task[None], float] = {}
        self._expired: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None

    def start(self, delivery: store.ClaimedDelivery) -> None:
        """Start the attempt on a slot of its endpoint (the caller checked one is free)."""
        task = asyncio.create_task(self._attempt(delivery), name=f"webhook-{delivery.id}")
        self._slots.take(task, delivery.subscription_id)
        self.claims[task] = delivery
        task.add_done_callback(self._finished)
        self.started += 1

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.claims.pop(task, None)
        self._slots.give_back(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("webhook_attempt_crashed", error=repr(task.exception()))

    async def aclose(self) -> None:
        """Close the HTTP session (its keep-alive connections)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._http is not None:
            await self._http.close()
            self._http = None

    def _client(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = open_session(
                self._policy,
                self._resolver,
                limit=self._settings.webhook_concurrency,
                limit_per_host=self._settings.webhook_origin_concurrency,
                user_agent=USER_AGENT,
            )
        return self._http

    async def _attempt(self, delivery: store.ClaimedDelivery) -> None:
        # Every log line of the attempt carries its ids. The task runs in its own copy of the
        # context, so they vanish with it: no unbinding (bound_contextvars would also read
        # the whole context first, a cost per attempt).
        structlog.contextvars.bind_contextvars(
            event_id=delivery.event_id,
            subscription_id=delivery.subscription_id,
            delivery_id=delivery.id,
            attempt=delivery.attempt,
        )
        if not recording():  # no tracer provider: skip building a no-op span per attempt
            await self._attempt_inner(delivery)
            return
        with span(
            "webhook.deliver",
            parent=delivery.trace,
            event_id=delivery.event_id,
            subscription_id=delivery.subscription_id,
            delivery_id=delivery.id,
            attempt=delivery.attempt,
        ):
            await self._attempt_inner(delivery)

    async def _attempt_inner(self, delivery: store.ClaimedDelivery) -> None:
        target = delivery.target
        started_at = datetime.now(UTC)
        t0 = time.perf_counter()
        status_code: int | None = None
        error: str | None = None
        retry_after: str | None = None
        head: str | None = None
        timeout = float(target.get("timeout") or self._settings.webhook_timeout)
        task = asyncio.current_task()
        assert task is not None
        # The whole exchange, from waiting for a connection to the end of the response head,
        # runs within the timeout: past it, the deadline sweeper cancels this task. Only
        # awaits inside this `try` can see that cancellation (registered just before, removed
        # in its `finally`), so it always lands in the handler below.
        self._deadlines[task] = t0 + timeout
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_deadlines(), name="webhook-deadlines")
        try:
            url = str(target["url"])
            # Host names are resolved and checked once, when a connection is opened.
            self._check_literal(url)
            body, headers = message(delivery, self._settings.event_source)
            stamp = int(time.time())
            msg_id = "msg_" + delivery.id.replace("-", "")
            headers["webhook-id"] = msg_id
            headers["webhook-timestamp"] = str(stamp)
            headers["webhook-signature"] = signature_header(
                msg_id, stamp, body, signing_secrets(target, started_at)
            )
            async with self._client().post(
                url, data=body, headers=headers, allow_redirects=False
            ) as response:
                status_code = response.status
                retry_after = response.headers.get("retry-after")
                head = await _read_head(response)
        except asyncio.CancelledError:
            # Cancelled for its timeout (and nothing else, e.g. shutdown): a timed-out attempt.
            if task not in self._expired or task.uncancel() > 0:
                raise
            error = None if status_code is not None else _error_text(TimeoutError())
        except Exception as exc:  # any failure of this attempt is recorded and retried
            error = _error_text(exc)
            if status_code is not None:
                error = None  # the response head timed out; the status still counts
        finally:
            del self._deadlines[task]
            self._expired.discard(task)
        latency_ms = (time.perf_counter() - t0) * 1000.0
        if status_code is not None and 200 <= status_code < 300:
            decision = DELIVERED  # what decide() answers, without its schedule and clock
        else:
            decision = decide(
                attempt=delivery.attempt,
                status_code=status_code,
                error=error,
                retry_after=retry_after,
                schedule=schedule_for(target),
                now=datetime.now(UTC),
                rng=self._rng,
            )
        await self._recorder.record(
            delivery, decision, started_at, latency_ms, status_code, error, head
        )

    async def _sweep_deadlines(self) -> None:
        """Cancel attempts past their timeout, every DEADLINE_SWEEP seconds while any is in
        its exchange (`_attempt_inner` turns that cancellation into a timeout)."""
        try:
            while self._deadlines:
                await asyncio.sleep(DEADLINE_SWEEP)
                now = time.perf_counter()  # the clock of the deadlines (`t0`)
                for task, deadline in self._deadlines.items():
                    if deadline <= now and task not in self._expired:
                        self._expired.add(task)
                        task.cancel()
        finally:
            self._sweeper = None

    def _check_literal(self, url: str) -> None:
        """`check_literal_url`, remembered for URLs that passed (same URL, same verdict)."""
        if url in self._checked_urls:
            return
        check_literal_url(url, self._policy)
        if len(self._checked_urls) >= CHECKED_URLS:
            self._checked_urls.clear()
        self._checked_urls.add(url)
