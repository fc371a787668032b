"""`Signals`: deliver a signal to one run's wait (or its inbox), resume every run waiting on an
event, and resolve event waits inside a publisher's transaction. Idempotency keys make a
repeat return the first call's result; hints go out after commit.
"""

from __future__ import annotations

from typing import Any

from ripple.platform.access import audit_store
from ripple.platform.core.config import Settings
from ripple.platform.core.db import Connection, Pool, map_errors, transaction
from ripple.platform.core.deadlines import Deadline, bounded
from ripple.platform.core.ids import check_idempotency_key, check_text
from ripple.platform.core.wake import NullWaker, RunReady
from ripple.platform.errors import Conflict, NotFound
from ripple.platform.events.contracts.validation import Contracts
from ripple.platform.ops import metrics, tracing
from ripple.workflows import serde, store
from ripple.workflows.runs.records import TERMINAL, SignalResult

__all__ = ["Signals"]


class Signals:
    """Signal runs and resolve the waits events match."""

    def __init__(
        self, pool: Pool, waker: NullWaker, settings: Settings, contracts: Contracts | None = None
    ) -> None:
        self.pool = pool
        self.contracts = contracts
        self.waker = waker
        self.settings = settings

    def _payload(self, payload: Any) -> Any:
        if payload is None:
            return {}
        return serde.dump(payload, field="payload", max_depth=self.settings.max_json_depth)

    async def signal(
        self,
        run_id: str,
        name: str,
        payload: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> SignalResult:
        """Resolve the run's earliest wait `name` whose match `payload` contains, or keep the
        signal in the run's inbox for the first later matching wait.

        A repeat with the same `idempotency_key` (per run) returns the first call's result and
        changes nothing, also after the run ended.
        """
        check_text(name, "signal name", field="name")
        check_idempotency_key(idempotency_key)
        payload = self._payload(payload)
        with tracing.span("workflow.signal", run_id=run_id, signal=name):
            return await bounded(
                self._signal(run_id, name, payload, idempotency_key),
                Deadline(self.settings.db_timeout),
            )

    async def _signal(
        self, run_id: str, name: str, payload: Any, idempotency_key: str | None
    ) -> SignalResult:
        scope = f"run:{run_id}"
        async with transaction(self.pool) as conn:
            earlier = await _claim_key(conn, scope, idempotency_key)
            if earlier is not None:
                delivered = bool(earlier.get("delivered"))
                return SignalResult(delivered=delivered, buffered=not delivered)
            status = await store.lock_run(conn, run_id=run_id)
            if status is None:
                raise NotFound(f"no run {run_id}: check the run id")
            if status in TERMINAL:
                raise Conflict(f"run {run_id} is {status}; signals go to active runs only")
            delivered = await store.signal_run(conn, run_id=run_id, name=name, payload=payload)
            await audit_store.record(
                conn, "run.signal", run_id, {"name": name, "delivered": delivered}
            )
            if idempotency_key is not None:
                await store.record_signal_key(
                    conn, scope=scope, key=idempotency_key, result={"delivered": delivered}
                )
        metrics.SIGNALS.labels("delivered" if delivered else "buffered").inc()
        if delivered:
            self.waker.notify(RunReady())
        return SignalResult(delivered=delivered, buffered=not delivered)

    async def resolve_event_waits(self, conn: Connection, topic: str, payload: Any) -> int:
        """Resolve, in the caller's transaction, every wait on `topic` whose match `payload`
        contains; returns how many (send RunReady after commit when not zero)."""
        with map_errors():
            locked = await store.lock_event_wait_runs(conn, event=topic, payload=payload)
            if not locked:
                return 0  # the common case: no run waits on this topic
            return await store.resolve_event_waits(
                conn, event=topic, payload=payload, run_ids=locked
            )

    async def matching_wait_runs(self, conn: Connection, topic: str, payload: Any) -> list[str]:
        """Runs with a wait an event on `topic` with `payload` would resolve (read-only)."""
        with map_errors():
            return await store.matching_wait_runs(conn, event=topic, payload=payload)

    async def signal_matching(
        self, event: str, payload: Any, *, idempotency_key: str | None = None
    ) -> int:
        """Resume every run waiting on `event` whose match `payload` contains.

        A repeat with the same `idempotency_key` (per event name) returns the first call's
        count and resumes nothing.
        """
        check_text(event, "event", field="event")
        check_idempotency_key(idempotency_key)
        payload = self._payload(payload)
        if self.contracts is not None:
            # The payload is the event's and the match of the waits: it must fit the topic's
            # schema and name only properties it declares (a typo would match nothing).
            await self.contracts.check(event, payload)
            if isinstance(payload, dict):
                await self.contracts.check_match(event, payload, field="payload")
        return await bounded(
            self._signal_matching(event, payload, idempotency_key),
            Deadline(self.settings.db_timeout),
        )

    async def _signal_matching(self, event: str, payload: Any, idempotency_key: str | None) -> int:
        scope = f"event:{event}"
        async with transaction(self.pool) as conn:
            earlier = await _claim_key(conn, scope, idempotency_key)
            if earlier is not None:
                return int(earlier.get("resumed", 0))
            count = await self.resolve_event_waits(conn, event, payload)
            if idempotency_key is not None:
                await store.record_signal_key(
                    conn, scope=scope, key=idempotency_key, result={"resumed": count}
                )
        if count:
            metrics.SIGNALS.labels("delivered").inc(count)
            self.waker.notify(RunReady())
        return count


async def _claim_key(
    conn: Connection, scope: str, idempotency_key: str | None
) -> dict[str, Any] | None:
    """None when the call goes ahead (no key, or its first use); else the first call's result.

    The key row is inserted first in the signal's transaction, so a concurrent repeat waits
    for the first call's commit and then reads its result (or, if it rolled back, goes ahead).
    """
    if idempotency_key is None:
        return None
    if await store.claim_signal_key(conn, scope=scope, key=idempotency_key):
        return None
    result = await store.read_signal_key_result(conn, scope=scope, key=idempotency_key)
    return result if result is not None else {}
