"""Operator actions on the database: each calls the `Client` method its REST route calls and
answers the route's JSON shape (built by `ripple.platform.api.results` and `.models`, which
import no FastAPI), so `--json` prints the same with or without `--api`.

`ClientOperator` has the methods of `ApiOperator` (ripple.platform.cli.remote, the same actions
over HTTP). Errors are the `Client`'s own (`RippleError`, `WorkflowError`, a schedule's
included); a target the request model would refuse raises `OperatorError` with pydantic's
reasons.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, TypeAdapter, ValidationError

from ripple.platform.api import results
from ripple.platform.api.models import (
    jsonable,
    schedule_out,
    step_out,
    subscription_out,
)
from ripple.platform.cli.operate import OperatorError

if TYPE_CHECKING:
    from ripple.platform.client import Client
    from ripple.platform.events.contracts.records import Compatibility

__all__ = ["ClientOperator"]

Json = Any


def _json(model: BaseModel) -> Json:
    """The JSON value the route answers with `model` (camelCase, ISO-8601 times)."""
    return model.model_dump(mode="json", by_alias=True)


class ClientOperator:
    """Operator actions through a connected `Client` (see the module docstring)."""

    def __init__(self, client: Client) -> None:
        self._client = client

    # -- topics and signals -----------------------------------------------------------------

    async def publish(self, topic: str, payload: Json, idempotency_key: str | None) -> Json:
        result = await self._client.publish(topic, payload, idempotency_key)
        return _json(results.published(result))

    async def register_schema(self, topic: str, schema: Json, compatibility: str | None) -> Json:
        version, created = await self._client.topics.register(
            topic, schema, cast("Compatibility | None", compatibility)
        )
        return {
            "topic": version.topic,
            "version": version.version,
            "compatibility": version.compatibility,
            "created": created,
        }

    async def check_schema(self, topic: str, schema: Json) -> Json:
        report = await self._client.topics.check_schema(topic, schema)
        return {"compatible": report.compatible, "problems": report.problems}

    async def get_schema(self, topic: str, version: int | None) -> Json:
        found = await self._client.topics.get_schema(topic, version)
        if found is None:
            return None
        return {
            "topic": found.topic,
            "version": found.version,
            "schema": found.schema,
            "compatibility": found.compatibility,
            "createdAt": TypeAdapter(datetime).dump_python(found.created_at, mode="json"),
        }

    async def explain(self, topic: str, payload: Json) -> Json:
        return _json(results.explanation_out(await self._client.explain(topic, payload)))

    async def asyncapi(self) -> Json:
        from ripple.platform.events.contracts.asyncapi import build_asyncapi

        client = self._client
        return build_asyncapi(
            await client.topics.latest_schemas(), await client.list_subscriptions()
        )

    async def signal_matching(self, event: str, payload: Json, idempotency_key: str | None) -> Json:
        resumed = await self._client.signal_matching(
            event, payload, idempotency_key=idempotency_key
        )
        return _json(results.Resumed(resumed=resumed))

    # -- subscriptions ----------------------------------------------------------------------

    async def subscribe(
        self, pattern: str, target: Json, filter: Json, backfill_since: datetime | None = None
    ) -> Json:
        from ripple.subscribers import Target

        try:
            model = TypeAdapter(Target).validate_python(target)
        except ValidationError as exc:
            raise OperatorError(f"invalid target: {_reasons(exc)}") from None
        sub = await self._client.subscribe(pattern, model, filter, backfill_since=backfill_since)
        return _json(subscription_out(sub, mask=False))

    async def set_paused(self, subscription_id: str, paused: bool) -> Json:
        if paused:
            sub = await self._client.pause_subscription(subscription_id)
        else:
            sub = await self._client.resume_subscription(subscription_id)
        return _json(subscription_out(sub))

    async def unsubscribe(self, subscription_id: str) -> bool:
        return await self._client.unsubscribe(subscription_id)

    async def subscriptions(self) -> Json:
        return [_json(subscription_out(s)) for s in await self._client.list_subscriptions()]

    async def replay(self, subscription_id: str, since: datetime, until: datetime | None) -> int:
        return await self._client.replay_events(subscription_id, since, until)

    # -- runs -------------------------------------------------------------------------------

    async def start(
        self,
        workflow: str,
        input: Json,
        idempotency_key: str | None,
        priority: int = 0,
        wait: float | None = None,
    ) -> Json:
        handle = await self._client.start(
            workflow, input, idempotency_key=idempotency_key, priority=priority
        )
        if wait is None:
            return _json(await results.started(self._client, handle.run_id, idempotency_key))
        return _json(results.ended(await self._client.wait_run(handle.run_id, wait)))

    async def retry(self, run_id: str) -> Json:
        await self._client.retry(run_id)
        return _json(await results.run_action(self._client, run_id))

    async def fork(self, run_id: str, from_step: str, input: Json) -> Json:
        handle = await self._client.fork(run_id, from_step, input)
        return _json(await results.run_action(self._client, handle.run_id))

    async def bulk(self, action: str, filter: dict[str, Any], dry_run: bool) -> int:
        act = self._client.cancel_many if action == "cancel" else self._client.retry_many
        return await act(**filter, dry_run=dry_run)

    async def list_runs(
        self,
        workflow: str | None,
        status: str | None,
        limit: int,
        cursor: str | None,
        where: str | None = None,
    ) -> Json:
        page = await self._client.list_runs(
            workflow, status, limit=limit, cursor=cursor, where=where
        )
        return _json(results.run_page(page))

    async def get_run(self, run_id: str) -> Json:
        return _json(results.waited_run(await results.existing_run(self._client, run_id)))

    async def steps(self, run_id: str) -> Json:
        await results.existing_run(self._client, run_id)
        return [_json(step_out(step)) for step in await self._client.list_steps(run_id)]

    async def cancel(self, run_id: str) -> bool:
        # `Client.cancel` raises the route's `NotFound` for a missing run: no read first.
        return await self._client.cancel(run_id)

    async def signal(
        self, run_id: str, name: str, payload: Json, idempotency_key: str | None
    ) -> Json:
        await results.existing_run(self._client, run_id)
        found = await self._client.signal(run_id, name, payload, idempotency_key=idempotency_key)
        return _json(results.SignalOut(delivered=found.delivered, buffered=found.buffered))

    # -- queues -----------------------------------------------------------------------------

    async def queue_send(
        self, queue: str, body: Json, group_id: str | None, delay: float | None
    ) -> Json:
        sent = await self._client.queues.send(queue, body, group_id=group_id, delay=delay)
        return _json(results.Sent(id=str(sent)))

    async def queue_receive(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout: float,
        wait: float,
        ack: bool,
        fair: bool = False,
    ) -> Json:
        messages = await self._client.queues.receive(
            queue,
            max_messages=max_messages,
            visibility_timeout=visibility_timeout,
            wait=wait,
            fair=fair,
        )
        if ack:
            for message in messages:
                await self._client.queues.ack(queue, message.receipt)
        return [_json(results.MessageOut.model_validate(jsonable(m))) for m in messages]

    async def queue_stats(self, queue: str) -> Json:
        return _json(results.stats_out(await self._client.queues.stats(queue)))

    async def queue_dead_letters(self, queue: str, limit: int) -> Json:
        limit = results.check_page_size(limit, self._client.settings.max_page_size)
        found = await self._client.queues.dead_letters(queue, limit)
        return [_json(results.DeadLetterOut.model_validate(jsonable(m))) for m in found]

    async def queue_redrive(self, queue: str) -> Json:
        # `Queues.redrive`'s default limit is the REST route's (and the dashboard's).
        redriven = await self._client.queues.redrive(queue)
        return _json(results.Redriven(redriven=redriven))

    # -- webhook deliveries -----------------------------------------------------------------

    async def deliveries(self, status: str | None, limit: int, cursor: str | None) -> Json:
        page = await self._client.deliveries.list(status=status, limit=limit, cursor=cursor)
        return _json(results.DeliveryPage.model_validate(jsonable(page)))

    async def delivery_redrive(self, delivery_id: str | None) -> Json:
        if delivery_id is None:
            count = await self._client.deliveries.redrive_failed()
            return _json(results.Redriven(redriven=count))
        await self._client.deliveries.redrive(delivery_id)
        return _json(results.Redriven(redriven=1))

    async def endpoint(self, subscription_id: str, *, resume: bool = False) -> Json:
        deliveries = self._client.deliveries
        if resume:
            health = await deliveries.resume_endpoint(subscription_id)
        else:
            health = await deliveries.endpoint(subscription_id)
        return _json(results.EndpointOut.model_validate(jsonable(health)))

    # -- schedules --------------------------------------------------------------------------

    async def schedules(self) -> Json:
        return [_json(schedule_out(info)) for info in await self._client.schedules.list()]

    async def schedule_create(self, body: Json) -> Json:
        fields = dict(body)
        info = await self._client.schedules.create(fields.pop("name"), **fields)
        return _json(schedule_out(info))

    async def schedule_action(self, name: str, action: str) -> Json:
        schedules = self._client.schedules
        if action == "trigger":
            return _json(results.Triggered(run_id=await schedules.trigger(name)))
        info = await (schedules.pause(name) if action == "pause" else schedules.resume(name))
        return _json(schedule_out(info))

    async def schedule_delete(self, name: str) -> bool:
        return await self._client.schedules.delete(name)

    # -- audit ------------------------------------------------------------------------------

    async def audit(
        self, since: datetime | None, action: str | None, limit: int, cursor: str | None
    ) -> Json:
        from ripple.platform.api.audit_results import audit_page_out

        page = await self._client.audit.list(since=since, action=action, limit=limit, cursor=cursor)
        return _json(audit_page_out(page))

    # -- tokens -----------------------------------------------------------------------------

    async def token_create(self, body: Json) -> Json:
        from datetime import timedelta

        from ripple.platform.api import token_results
        from ripple.platform.core.limits import RateLimit

        expires = body.get("expiresIn")
        limit = body.get("rateLimit")
        token = await self._client.tokens.create(
            body["name"],
            body["scopes"],
            None if expires is None else timedelta(seconds=expires),
            None if limit is None else RateLimit(limit["limit"], limit["perSeconds"]),
        )
        return _json(token_results.created_token(token))

    async def tokens(self) -> Json:
        from ripple.platform.api import token_results

        return [_json(token_results.token_out(t)) for t in await self._client.tokens.list()]

    async def token_revoke(self, token_id: str) -> Json:
        from ripple.platform.api import token_results

        if await self._client.tokens.get(token_id) is None:
            raise OperatorError(f"no token {token_id}; list them with `ripple tokens list`")
        revoked = await self._client.tokens.revoke(token_id)
        return _json(token_results.Revoked(id=token_id, revoked=revoked))


def _reasons(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}" for err in exc.errors()
    )
