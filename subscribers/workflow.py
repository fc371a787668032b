"""`WorkflowKind`: fan-out to workflows (one run per event and subscription).

The run's input is the event payload; its idempotency key `event:{event_id}:{subscription_id}`
makes the fan-out idempotent per (event, subscription). Runs are created in the publish
transaction through the workflow client, which wakes workers after the commit.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from ripple.platform.core.db import Connection
from ripple.platform.errors import InvalidInput
from ripple.platform.events.fanout import FanOutItem, PublishedEvent, SubscriptionRow
from ripple.platform.ops import metrics
from ripple.subscribers.targets import WorkflowTarget
from ripple.workflows.authoring.definition import check_workflow_name
from ripple.workflows.runs.client import WorkflowClient
from ripple.workflows.runs.starts import RunRequest

__all__ = ["WorkflowKind"]


class WorkflowKind:
    """Workflow targets: `{"type": "workflow", "workflow": name}`."""

    kind = "workflow"

    def __init__(self, workflow_client: WorkflowClient) -> None:
        self._starts = workflow_client.starts

    async def validate(self, target: dict[str, Any]) -> dict[str, Any]:
        try:
            parsed = WorkflowTarget.model_validate(target)
        except ValueError as exc:
            raise InvalidInput(f"invalid workflow target: {exc}", field="target") from None
        try:
            check_workflow_name(parsed.workflow)
        except InvalidInput as exc:
            raise InvalidInput(str(exc), field="target.workflow") from None
        return parsed.to_row()

    async def fan_out(self, conn: Connection, items: Sequence[FanOutItem]) -> list[int]:
        """One `create_runs` call for every (event, subscription) run of a publish group."""
        requests = [
            RunRequest(
                workflow=str(sub.target["workflow"]),
                input=event.payload,
                idempotency_key=f"event:{event.event_id}:{sub.id}"
                + ("" if event.replay_id is None else f":replay:{event.replay_id}"),
                trace=event.trace,
                input_json=event.payload_text(),
            )
            for event, subscriptions in items
            for sub in subscriptions
        ]
        created = await self._starts.create_runs(conn, requests)
        if len(items) == 1:
            return [created]
        # Events in a group are new, so every run is new; a repeat (not possible through
        # publish) would only make these counts an upper bound.
        return [len(subscriptions) for _, subscriptions in items]

    def count_committed(self, written: Sequence[tuple[Sequence[SubscriptionRow], int]]) -> None:
        """Runs started, by workflow. A publish's events are new, so each subscription of an
        event started a run (`created` is smaller only for a repeat, which starts none of the
        subscriptions after the count)."""
        started: Counter[str] = Counter()
        for subscriptions, created in written:
            for sub in subscriptions[:created]:
                started[str(sub.target["workflow"])] += 1
        for workflow, n in started.items():
            metrics.RUNS_STARTED.labels(workflow).inc(n)

    def after_commit(self, event: PublishedEvent, subscriptions: Sequence[SubscriptionRow]) -> None:
        self._starts.notify_runs_ready()
