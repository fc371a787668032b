"""Webhook subscriptions: the fan-out kind, operator functions on deliveries, secret rotation.

Owns what happens to a webhook target outside the delivery loop: validating it when a
subscription is created (URL scheme, SSRF check, secret, timeout, retry policy), writing one
delivery row per (event, subscription) inside the publish transaction, and listing, redriving and
rotating for the API and CLI. The loop itself is `WebhookDispatcher` (`dispatcher.py`).
"""

from __future__ import annotations

import asyncio
import builtins
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ripple.platform.access import audit_store
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool, transaction
from ripple.platform.core.ids import derived_id
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import DeliveriesReady, SubscriptionsChanged, Waker
from ripple.platform.errors import Conflict, InvalidInput, NotFound
from ripple.platform.events import subscription_store
from ripple.platform.events.fanout import FanOutItem, PublishedEvent, SubscriptionRow
from ripple.subscribers.targets import (
    DEFAULT_MAX_IN_FLIGHT,
    MAX_IN_FLIGHT,
    WEBHOOK_FORMATS,
    rate_limit_of,
    rate_limit_row,
)
from ripple.subscribers.webhooks import delivery_store as store
from ripple.subscribers.webhooks.delivery_store import (
    Attempt,
    Delivery,
    DeliveryPage,
    DeliveryStatus,
    EndpointHealth,
)
from ripple.subscribers.webhooks.signing import decode_secret, generate_secret
from ripple.subscribers.webhooks.ssrf import (
    AddressPolicy,
    Resolver,
    SystemResolver,
    Unresolvable,
    check_url,
)
from ripple.workflows.authoring.retry import RetryPolicy, seconds

if TYPE_CHECKING:
    from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher

__all__ = [
    "Attempt",
    "Deliveries",
    "Delivery",
    "DeliveryPage",
    "DeliveryStatus",
    "EndpointHealth",
    "WebhookDispatcher",
    "WebhookKind",
]

log = get_logger("ripple.webhooks")


def _check_format(target: dict[str, Any]) -> None:
    if target.get("format", "ripple") not in WEBHOOK_FORMATS:
        raise InvalidInput(
            f"webhook `format` must be one of {', '.join(WEBHOOK_FORMATS)}", field="format"
        )


def __getattr__(name: str) -> Any:
    """`WebhookDispatcher` is re-exported here but imported on first use: it loads aiohttp,
    which a process that sends no webhook (a CLI command, the API) does not need."""
    if name == "WebhookDispatcher":
        from ripple.subscribers.webhooks.dispatcher import WebhookDispatcher

        return WebhookDispatcher
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Seconds a subscription waits for DNS when checking a webhook host.
RESOLVE_TIMEOUT = 5.0
#: Longest per-attempt timeout a target may ask for, in seconds.
MAX_TIMEOUT = 300.0


class WebhookKind:
    """The `webhook` subscription kind (a `ripple.platform.events.fanout.TargetKind`)."""

    kind = "webhook"

    def __init__(
        self, settings: Settings, waker: Waker | None = None, *, resolver: Resolver | None = None
    ) -> None:
        self._settings = settings
        self._waker = waker
        self._policy = AddressPolicy.from_cidrs(settings.webhook_allowed_networks)
        self._resolver: Resolver = resolver or SystemResolver()

    async def validate(self, target: dict[str, Any]) -> dict[str, Any]:
        """Check a webhook target; return it normalised. Raises `InvalidInput`."""
        url = target.get("url")
        if not isinstance(url, str) or not url:
            raise InvalidInput("webhook target needs a `url` (http:// or https://)", field="url")
        try:
            async with asyncio.timeout(RESOLVE_TIMEOUT):
                await check_url(url, self._policy, self._resolver)
        except (Unresolvable, TimeoutError) as exc:
            # Nothing to connect to, so nothing to refuse yet: every attempt checks again.
            log.warning("webhook_host_unresolved", url=url, error=str(exc) or "timed out")
        except ValueError as exc:
            raise InvalidInput(str(exc), field="url") from exc
        # The limits are stored camelCase (`_limits`), whichever spelling came in.
        out = {k: v for k, v in target.items() if k not in ("max_in_flight", "rate_limit")}
        secret = target.get("secret")
        if secret is None:
            out["secret"] = generate_secret()
        else:
            try:
                decode_secret(str(secret))
            except ValueError as exc:
                raise InvalidInput(str(exc), field="secret") from exc
        timeout = target.get("timeout")
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, int | float):
                raise InvalidInput("webhook `timeout` must be a number of seconds", field="timeout")
            if not 0 < float(timeout) <= MAX_TIMEOUT:
                raise InvalidInput(
                    f"webhook `timeout` must be between 0 and {MAX_TIMEOUT:.0f} seconds",
                    field="timeout",
                )
        retry = target.get("retry")
        if retry is not None:
            try:
                if not isinstance(retry, dict):
                    raise TypeError("not an object")
                out["retry"] = RetryPolicy.from_json(retry).to_json()
            except (TypeError, ValueError) as exc:
                raise InvalidInput(
                    f"webhook `retry` is not a retry policy: {exc}", field="retry"
                ) from exc
        _check_format(target)
        out.update(_limits(target))
        out["type"] = self.kind
        return out

    async def fan_out(self, conn: Connection, items: Sequence[FanOutItem]) -> list[int]:
        """One pending delivery per (event, subscription), due now, in one statement;
        idempotent per (event, subscription, replay): the delivery id is derived from them
        (the partitioned delivery table can only enforce uniqueness on its id), in the event's
        millisecond, so a delivery and its attempts live in its event's time partition. A
        repeat counts zero."""
        pairs = [(event, sub) for event, subscriptions in items for sub in subscriptions]
        if not pairs:
            return [0] * len(items)
        written = await store.insert_deliveries_batch(
            conn,
            [
                derived_id(event.event_id, sub.id, event.replay_id or store.LIVE_REPLAY_ID)
                for event, sub in pairs
            ],
            [sub.id for _, sub in pairs],
            [event.event_id for event, _ in pairs],
            [event.topic for event, _ in pairs],
            [event.payload_text() for event, _ in pairs],
            [event.created_at for event, _ in pairs],
            [event.trace for event, _ in pairs],
            [event.replay_id or store.LIVE_REPLAY_ID for event, _ in pairs],
            [event.schema_version for event, _ in pairs],
        )
        return [written[event.event_id] for event, _ in items]

    def count_committed(self, written: Sequence[tuple[Sequence[SubscriptionRow], int]]) -> None:
        """Nothing beyond the deliveries counted by the publisher."""

    def after_commit(self, event: PublishedEvent, subscriptions: Sequence[SubscriptionRow]) -> None:
        """Wake dispatchers. Never raises."""
        if subscriptions and self._waker is not None:
            self._waker.notify(DeliveriesReady())


def _limits(target: dict[str, Any]) -> dict[str, Any]:
    """A target's `maxInFlight` (default 10) and `rateLimit` ({limit, perSeconds}), checked."""
    out: dict[str, Any] = {}
    cap = target.get("maxInFlight", target.get("max_in_flight", DEFAULT_MAX_IN_FLIGHT))
    if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= MAX_IN_FLIGHT:
        raise InvalidInput(
            f"webhook `maxInFlight` must be an integer from 1 to {MAX_IN_FLIGHT}, got {cap!r}",
            field="maxInFlight",
        )
    out["maxInFlight"] = cap
    limit = rate_limit_of(target.get("rateLimit", target.get("rate_limit")))
    if limit is not None:
        out["rateLimit"] = rate_limit_row(limit)
    return out


async def _webhook_subscription(conn: Connection, subscription_id: str) -> None:
    """Raise `NotFound` for no such subscription, `Conflict` for one whose target is not a
    webhook (it exists, but has no endpoint)."""
    record = await subscription_store.get_subscription(conn, subscription_id)
    if record is None:
        raise NotFound(f"no webhook subscription {subscription_id}")
    if record.kind != "webhook":
        raise Conflict(
            f"subscription {subscription_id} has a {record.kind} target: only a webhook "
            "subscription has an endpoint"
        )


def _uuid(value: str | uuid.UUID, what: str) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    parsed = store.parse_uuid(value)
    if parsed is None:
        raise NotFound(f"no {what} {value!r}: ids are UUIDs")
    return parsed


class Deliveries:
    """Operator view of webhook deliveries, bound to a pool and waker (`Client.deliveries`):
    list, inspect, redrive, rotate secrets. The one way the API, CLI and UI reach them."""

    def __init__(
        self, pool: Pool, waker: Waker | None, settings: Settings, *, read_pool: Pool | None = None
    ) -> None:
        self._pool = pool
        #: Where the listing reads (a replica's pool with RIPPLE_DATABASE_READ_URL).
        self._read_pool = read_pool or pool
        self._waker = waker
        self._settings = settings

    def _hint(self) -> None:
        if self._waker is not None:
            self._waker.notify(DeliveriesReady())

    async def list(
        self,
        *,
        status: str | None = None,
        subscription_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> DeliveryPage:
        """A page of deliveries, newest first, optionally by status and subscription."""
        if status is not None and status not in DeliveryStatus.ALL:
            raise InvalidInput(
                f"status must be one of {', '.join(DeliveryStatus.ALL)} (got {status!r})",
                field="status",
            )
        max_limit = self._settings.max_page_size
        if not 1 <= limit <= max_limit:
            raise InvalidInput(f"limit must be between 1 and {max_limit}", field="limit")
        sub = None
        if subscription_id is not None:
            sub = store.parse_uuid(subscription_id)
            if sub is None:
                raise InvalidInput(
                    "subscription must be a subscription id (UUID)", field="subscription"
                )
        after = None
        if cursor is not None:
            after = store.parse_uuid(cursor)
            if after is None:
                raise InvalidInput("cursor is not one this API returned", field="cursor")
        async with transaction(self._read_pool) as conn:
            return await store.list_deliveries(
                conn, status=status, subscription_id=sub, cursor=after, limit=limit
            )

    async def get(self, delivery_id: str) -> Delivery | None:
        """One delivery, or None."""
        parsed = store.parse_uuid(delivery_id)
        if parsed is None:
            return None
        async with transaction(self._pool) as conn:
            return await store.get_delivery(conn, parsed)

    async def attempts(self, delivery_id: str) -> builtins.list[Attempt]:
        """Every attempt of a delivery, oldest first (NotFound if there is no such delivery)."""
        parsed = _uuid(delivery_id, "delivery")
        async with transaction(self._pool) as conn:
            if await store.get_delivery(conn, parsed) is None:
                raise NotFound(f"no delivery {delivery_id}")
            return await store.list_attempts(conn, parsed)

    async def redrive(self, delivery_id: str) -> Delivery:
        """Send a failed (dead-lettered) delivery again, with a fresh attempt budget; the
        delivery as it is now. Raises `NotFound` if there is no such delivery, `Conflict` if
        it is not failed."""
        parsed = _uuid(delivery_id, "delivery")
        async with transaction(self._pool) as conn:
            if not await store.redrive(conn, parsed):
                current = await store.get_delivery(conn, parsed)
                if current is None:
                    raise NotFound(f"no delivery {delivery_id}")
                raise Conflict(
                    f"delivery {delivery_id} is {current.status}; only failed deliveries can be "
                    "redriven"
                )
            delivery = await store.get_delivery(conn, parsed)
            await audit_store.record(conn, "delivery.redrive", str(parsed))
        self._hint()
        assert delivery is not None
        return delivery

    async def redrive_failed(
        self, *, subscription_id: str | None = None, since: datetime | None = None
    ) -> int:
        """Redrive every failed delivery (of one subscription, failed since `since`); how many."""
        sub = None if subscription_id is None else _uuid(subscription_id, "subscription")
        async with transaction(self._pool) as conn:
            count = await store.redrive_failed(conn, subscription_id=sub, since=since)
            flt = {"subscription_id": None if sub is None else str(sub), "since": since}
            details = {
                "filter": {
                    k: v.isoformat() if isinstance(v, datetime) else v
                    for k, v in flt.items()
                    if v is not None
                },
                "count": count,
            }
            await audit_store.record(conn, "delivery.redrive", None, details)
        if count:
            self._hint()
        return count

    async def endpoint(self, subscription_id: str) -> EndpointHealth:
        """The endpoint of a webhook subscription: its circuit breaker, failures in a row and
        deliveries in flight. Raises `NotFound`, or `Conflict` when its target is no webhook."""
        sub = _uuid(subscription_id, "subscription")
        async with transaction(self._pool) as conn:
            await _webhook_subscription(conn, subscription_id)
            (health,) = await store.endpoints(conn, [sub])
        return health

    async def endpoints(self, subscription_ids: Sequence[str]) -> builtins.list[EndpointHealth]:
        """The endpoint of each of these webhook subscriptions, in order (for listings)."""
        subs = [_uuid(s, "subscription") for s in subscription_ids]
        async with transaction(self._read_pool) as conn:
            return await store.endpoints(conn, subs)

    async def resume_endpoint(self, subscription_id: str) -> EndpointHealth:
        """Resume a webhook endpoint now: close its circuit and make its waiting deliveries
        (retries, and those held back by the circuit) due at once. Returns the endpoint as it
        is now. Raises `NotFound`, or `Conflict` when its target is no webhook."""
        sub = _uuid(subscription_id, "subscription")
        async with transaction(self._pool) as conn:
            await _webhook_subscription(conn, subscription_id)
            was_open = await store.close_circuit(conn, sub)
            due = await store.due_now(conn, sub)
            await audit_store.record(
                conn, "endpoint.resume", subscription_id, {"wasOpen": was_open, "due": due}
            )
            (health,) = await store.endpoints(conn, [sub])
        log.info("webhook_endpoint_resumed", subscription_id=subscription_id, was_open=was_open)
        self._hint()
        return health

    async def rotate_secret(
        self,
        subscription_id: str,
        new_secret: str | None = None,
        *,
        overlap: timedelta | float = timedelta(hours=24),
    ) -> str:
        """Replace a webhook subscription's secret; the old one keeps signing for `overlap`.

        During the overlap every message carries two signatures (new and old), so receivers
        can switch secrets at their own pace. Returns the new secret (generated when not given).
        """
        secret = new_secret or generate_secret()
        try:
            decode_secret(secret)
        except ValueError as exc:
            raise InvalidInput(str(exc), field="secret") from exc
        sub = _uuid(subscription_id, "subscription")
        async with transaction(self._pool) as conn:
            target = await store.webhook_target_for_update(conn, sub)
            if target is None:
                raise NotFound(f"no webhook subscription {subscription_id}")
            until = datetime.now(UTC) + timedelta(seconds=seconds(overlap))
            rotated = dict(target)
            rotated["previousSecret"] = target.get("secret")
            rotated["previousSecretExpiresAt"] = until.isoformat()
            rotated["secret"] = secret
            await store.update_target(conn, sub, rotated)
            await subscription_store.bump_version(conn)
        if self._waker is not None:
            self._waker.notify(SubscriptionsChanged())
        return secret
