"""Operator actions for the CLI, over the database (a `Client`) or over HTTP (an API).

Both backends return the same JSON shapes the REST API answers with (camelCase dicts), so the
CLI renders and `--json`-prints one format whichever way it talks to Ripple. Failures raise
`OperatorError` with a message fit for a terminal.
"""

from __future__ import annotations

from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, Self

import httpx

from ripple.platform.api.models import (
    Published,
    camel,
    jsonable,
    run_out,
    schedule_out,
    step_out,
    subscription_out,
)
from ripple.platform.errors import NotFound, RippleError

if TYPE_CHECKING:
    from ripple.platform.client import Client

__all__ = ["LocalOperator", "Operator", "OperatorError", "RemoteOperator"]

Json = Any


class OperatorError(Exception):
    """An operator command failed; the message says why."""


class Operator(Protocol):
    """What the CLI's operator commands need, whichever way they reach Ripple."""

    async def __aenter__(self) -> Self: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    async def publish(self, topic: str, payload: Json, idempotency_key: str | None) -> Json: ...
    async def explain(self, topic: str, payload: Json) -> Json: ...
    async def subscribe(
        self, pattern: str, target: Json, filter: Json, backfill_since: datetime | None = None
    ) -> Json: ...
    async def unsubscribe(self, subscription_id: str) -> bool: ...
    async def set_paused(self, subscription_id: str, paused: bool) -> Json: ...
    async def subscriptions(self) -> Json: ...
    async def start(
        self,
        workflow: str,
        input: Json,
        idempotency_key: str | None,
        priority: int = 0,
        wait: float | None = None,
    ) -> Json: ...
    async def retry(self, run_id: str) -> Json: ...
    async def fork(self, run_id: str, from_step: str, input: Json) -> Json: ...
    async def bulk(self, action: str, filter: dict[str, Any], dry_run: bool) -> int: ...
    async def replay(
        self, subscription_id: str, since: datetime, until: datetime | None
    ) -> int: ...
    async def list_runs(
        self, workflow: str | None, status: str | None, limit: int, cursor: str | None
    ) -> Json: ...
    async def get_run(self, run_id: str) -> Json: ...
    async def steps(self, run_id: str) -> Json: ...
    async def cancel(self, run_id: str) -> bool: ...
    async def signal(
        self, run_id: str, name: str, payload: Json, idempotency_key: str | None
    ) -> Json: ...
    async def signal_matching(
        self, event: str, payload: Json, idempotency_key: str | None
    ) -> Json: ...
    async def queue_send(
        self, queue: str, body: Json, group_id: str | None, delay: float | None
    ) -> Json: ...
    async def queue_receive(
        self, queue: str, max_messages: int, visibility_timeout: float, wait: float, ack: bool
    ) -> Json: ...
    async def queue_stats(self, queue: str) -> Json: ...
    async def queue_dead_letters(self, queue: str, limit: int) -> Json: ...
    async def queue_redrive(self, queue: str) -> Json: ...
    async def deliveries(self, status: str | None, limit: int, cursor: str | None) -> Json: ...
    async def delivery_redrive(self, delivery_id: str | None) -> Json: ...
    async def schedules(self) -> Json: ...
    async def schedule_create(self, body: Json) -> Json: ...
    async def schedule_action(self, name: str, action: str) -> Json: ...
    async def schedule_delete(self, name: str) -> bool: ...


class LocalOperator:
    """Talks to Postgres directly through a `Client` (the default)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def __aenter__(self) -> Self:
        try:
            await self.client.connect()
        except RippleError as exc:
            raise OperatorError(exc.message) from exc
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.client.close()
        if isinstance(exc, RippleError):
            raise OperatorError(exc.message) from exc

    async def publish(self, topic: str, payload: Json, idempotency_key: str | None) -> Json:
        result = await self.client.publish(topic, payload, idempotency_key)
        return Published.model_validate(jsonable(result)).model_dump(mode="json", by_alias=True)

    async def explain(self, topic: str, payload: Json) -> Json:
        result = jsonable(await self.client.explain(topic, payload))
        for verdict in result.get("subscriptions", []):
            if isinstance(verdict.get("target"), dict) and "secret" in verdict["target"]:
                verdict["target"]["secret"] = "whsec_…"
        return result

    async def subscribe(
        self, pattern: str, target: Json, filter: Json, backfill_since: datetime | None = None
    ) -> Json:
        from pydantic import TypeAdapter, ValidationError

        from ripple.subscribers import Target

        try:
            parsed = TypeAdapter(Target).validate_python(target)
        except ValidationError as exc:
            raise OperatorError(f"invalid target: {exc}") from exc
        sub = await self.client.subscribe(pattern, parsed, filter, backfill_since=backfill_since)
        return subscription_out(sub, mask=False).model_dump(mode="json", by_alias=True)

    async def unsubscribe(self, subscription_id: str) -> bool:
        return await self.client.unsubscribe(subscription_id)

    async def set_paused(self, subscription_id: str, paused: bool) -> Json:
        change = self.client.pause_subscription if paused else self.client.resume_subscription
        sub = await change(subscription_id)
        return subscription_out(sub).model_dump(mode="json", by_alias=True)

    async def subscriptions(self) -> Json:
        subs = await self.client.list_subscriptions()
        return [subscription_out(s).model_dump(mode="json", by_alias=True) for s in subs]

    async def start(
        self,
        workflow: str,
        input: Json,
        idempotency_key: str | None,
        priority: int = 0,
        wait: float | None = None,
    ) -> Json:
        handle = await self.client.start(
            workflow, input, idempotency_key=idempotency_key, priority=priority
        )
        if wait is not None:
            outcome = await self.client.wait_run(handle.run_id, wait)
            done = outcome.run
            return {
                "runId": done.run_id,
                "status": done.status.value,
                "output": done.output,
                "error": done.error,
                "timedOut": outcome.timed_out,
            }
        run = await self.client.get_run(handle.run_id)
        return {"runId": handle.run_id, "status": run.status if run else "pending"}

    async def _run_action(self, run_id: str) -> Json:
        run = await self.client.get_run(run_id)
        assert run is not None
        return {"runId": run.run_id, "status": run.status.value, "forkedFrom": run.forked_from}

    async def retry(self, run_id: str) -> Json:
        await self.client.retry(run_id)
        return await self._run_action(run_id)

    async def fork(self, run_id: str, from_step: str, input: Json) -> Json:
        handle = await self.client.fork(run_id, from_step, input)
        return await self._run_action(handle.run_id)

    async def bulk(self, action: str, filter: dict[str, Any], dry_run: bool) -> int:
        act = self.client.cancel_many if action == "cancel" else self.client.retry_many
        return await act(**filter, dry_run=dry_run)

    async def replay(self, subscription_id: str, since: datetime, until: datetime | None) -> int:
        return await self.client.replay_events(subscription_id, since, until)

    async def list_runs(
        self, workflow: str | None, status: str | None, limit: int, cursor: str | None
    ) -> Json:
        page = await self.client.list_runs(workflow, status, limit=limit, cursor=cursor)
        return {
            "items": [run_out(r).model_dump(mode="json", by_alias=True) for r in page.items],
            "nextCursor": page.next_cursor,
        }

    async def get_run(self, run_id: str) -> Json:
        run = await self.client.get_run(run_id)
        if run is None:
            raise OperatorError(f"no run {run_id}")
        return run_out(run).model_dump(mode="json", by_alias=True)

    async def steps(self, run_id: str) -> Json:
        steps = await self.client.list_steps(run_id)
        return [step_out(s).model_dump(mode="json", by_alias=True) for s in steps]

    async def cancel(self, run_id: str) -> bool:
        if await self.client.get_run(run_id) is None:
            raise OperatorError(f"no run {run_id}")
        return await self.client.cancel(run_id)

    async def signal(
        self, run_id: str, name: str, payload: Json, idempotency_key: str | None
    ) -> Json:
        result = await self.client.signal(run_id, name, payload, idempotency_key=idempotency_key)
        return {"delivered": result.delivered, "buffered": result.buffered}

    async def signal_matching(self, event: str, payload: Json, idempotency_key: str | None) -> Json:
        resumed = await self.client.signal_matching(event, payload, idempotency_key=idempotency_key)
        return {"resumed": resumed}

    async def queue_send(
        self, queue: str, body: Json, group_id: str | None, delay: float | None
    ) -> Json:
        sent = jsonable(await self.client.queues.send(queue, body, group_id=group_id, delay=delay))
        return {"id": sent.get("id") if isinstance(sent, dict) else sent}

    async def queue_receive(
        self, queue: str, max_messages: int, visibility_timeout: float, wait: float, ack: bool
    ) -> Json:
        messages = await self.client.queues.receive(
            queue, max_messages=max_messages, visibility_timeout=visibility_timeout, wait=wait
        )
        if ack:
            for message in messages:
                await self.client.queues.ack(queue, message.receipt)
        return jsonable(messages)

    async def queue_stats(self, queue: str) -> Json:
        return jsonable(await self.client.queues.stats(queue))

    async def queue_dead_letters(self, queue: str, limit: int) -> Json:
        return jsonable(await self.client.queues.dead_letters(queue, limit))

    async def queue_redrive(self, queue: str) -> Json:
        return {"redriven": await self.client.queues.redrive(queue)}

    async def deliveries(self, status: str | None, limit: int, cursor: str | None) -> Json:
        page = await self.client.deliveries.list(status=status, limit=limit, cursor=cursor)
        return {"items": jsonable(page.items), "nextCursor": page.next_cursor}

    async def delivery_redrive(self, delivery_id: str | None) -> Json:
        if delivery_id is None:
            return {"redriven": await self.client.deliveries.redrive_failed()}
        try:
            await self.client.deliveries.redrive(delivery_id)
        except NotFound as exc:
            raise OperatorError(exc.message) from exc
        return {"redriven": 1}

    async def schedules(self) -> Json:
        return [_dump(schedule_out(s)) for s in await self.client.schedules.list()]

    async def schedule_create(self, body: Json) -> Json:
        info = await self.client.schedules.create(
            body["name"],
            workflow=body.get("workflow"),
            topic=body.get("topic"),
            cron=body.get("cron"),
            every=body.get("every"),
            timezone=body.get("timezone") or "UTC",
            input=body.get("input"),
            overlap=body.get("overlap") or "skip",
        )
        return _dump(schedule_out(info))

    async def schedule_action(self, name: str, action: str) -> Json:
        schedules = self.client.schedules
        try:
            if action == "trigger":
                return {"runId": await schedules.trigger(name)}
            info = await (schedules.pause(name) if action == "pause" else schedules.resume(name))
        except NotFound as exc:
            raise OperatorError(exc.message) from exc
        return _dump(schedule_out(info))

    async def schedule_delete(self, name: str) -> bool:
        return await self.client.schedules.delete(name)


class RemoteOperator:
    """Talks to a Ripple API over HTTP (`--api URL --token T`)."""

    def __init__(self, base_url: str, token: str | None, *, timeout: float = 60.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._http.aclose()

    async def _call(self, method: str, path: str, **kwargs: Any) -> Json:
        try:
            response = await self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise OperatorError(f"cannot reach the API at {self._http.base_url}: {exc}") from exc
        if response.status_code >= 400:
            try:
                problem = response.json()
                message = problem.get("detail") or problem.get("title")
            except ValueError:
                message = response.text[:200]
            raise OperatorError(f"{response.status_code}: {message}")
        if response.status_code == 204 or not response.content:
            return None
        return response.json()

    async def publish(self, topic: str, payload: Json, idempotency_key: str | None) -> Json:
        body = {"payload": payload, "idempotencyKey": idempotency_key}
        return await self._call("POST", f"/v1/topics/{topic}/events", json=body)

    async def explain(self, topic: str, payload: Json) -> Json:
        import json

        params = {"payload": json.dumps(payload)}
        return await self._call("GET", f"/v1/topics/{topic}/explain", params=params)

    async def subscribe(
        self, pattern: str, target: Json, filter: Json, backfill_since: datetime | None = None
    ) -> Json:
        body = {"pattern": pattern, "target": target, "filter": filter}
        if backfill_since is not None:
            body["backfillSince"] = backfill_since.isoformat()
        return await self._call("POST", "/v1/subscriptions", json=body)

    async def set_paused(self, subscription_id: str, paused: bool) -> Json:
        verb = "pause" if paused else "resume"
        return await self._call("POST", f"/v1/subscriptions/{subscription_id}/{verb}")

    async def unsubscribe(self, subscription_id: str) -> bool:
        try:
            await self._call("DELETE", f"/v1/subscriptions/{subscription_id}")
        except OperatorError as exc:
            if str(exc).startswith("404"):
                return False
            raise
        return True

    async def subscriptions(self) -> Json:
        return await self._call("GET", "/v1/subscriptions")

    async def start(
        self,
        workflow: str,
        input: Json,
        idempotency_key: str | None,
        priority: int = 0,
        wait: float | None = None,
    ) -> Json:
        body = {"input": input, "idempotencyKey": idempotency_key, "priority": priority}
        if wait is None:
            return await self._call("POST", f"/v1/workflows/{workflow}/runs", json=body)
        return await self._call(
            "POST",
            f"/v1/workflows/{workflow}/runs",
            json=body,
            params={"wait": wait},
            timeout=wait + 30,
        )

    async def retry(self, run_id: str) -> Json:
        return await self._call("POST", f"/v1/runs/{run_id}/retry")

    async def fork(self, run_id: str, from_step: str, input: Json) -> Json:
        body = {"fromStep": from_step, "input": input}
        return await self._call("POST", f"/v1/runs/{run_id}/fork", json=body)

    async def bulk(self, action: str, filter: dict[str, Any], dry_run: bool) -> int:
        body = {
            camel(k): v.isoformat() if isinstance(v, datetime) else v
            for k, v in filter.items()
            if v is not None
        }
        body["dryRun"] = dry_run
        result = await self._call("POST", f"/v1/runs/{action}", json=body)
        return int(result["count"])

    async def replay(self, subscription_id: str, since: datetime, until: datetime | None) -> int:
        body = {"since": since.isoformat(), "until": until.isoformat() if until else None}
        result = await self._call("POST", f"/v1/subscriptions/{subscription_id}/replay", json=body)
        return int(result["replayed"])

    async def list_runs(
        self, workflow: str | None, status: str | None, limit: int, cursor: str | None
    ) -> Json:
        params = {"workflow": workflow, "status": status, "limit": limit, "cursor": cursor}
        clean = {k: v for k, v in params.items() if v is not None}
        return await self._call("GET", "/v1/runs", params=clean)

    async def get_run(self, run_id: str) -> Json:
        return await self._call("GET", f"/v1/runs/{run_id}")

    async def steps(self, run_id: str) -> Json:
        return await self._call("GET", f"/v1/runs/{run_id}/steps")

    async def cancel(self, run_id: str) -> bool:
        result = await self._call("DELETE", f"/v1/runs/{run_id}")
        return bool(result["canceled"])

    async def signal(
        self, run_id: str, name: str, payload: Json, idempotency_key: str | None
    ) -> Json:
        headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        path = f"/v1/runs/{run_id}/signals/{name}"
        return await self._call("POST", path, json=payload, headers=headers)

    async def signal_matching(self, event: str, payload: Json, idempotency_key: str | None) -> Json:
        body = {"event": event, "payload": payload, "idempotencyKey": idempotency_key}
        return await self._call("POST", "/v1/signals", json=body)

    async def queue_send(
        self, queue: str, body: Json, group_id: str | None, delay: float | None
    ) -> Json:
        data = {"body": body, "groupId": group_id, "delay": delay}
        return await self._call("POST", f"/v1/queues/{queue}/messages", json=data)

    async def queue_receive(
        self, queue: str, max_messages: int, visibility_timeout: float, wait: float, ack: bool
    ) -> Json:
        data = {"maxMessages": max_messages, "visibilityTimeout": visibility_timeout, "wait": wait}
        result = await self._call("POST", f"/v1/queues/{queue}/messages/receive", json=data)
        messages = result["messages"]
        if ack:
            for message in messages:
                await self._call("DELETE", f"/v1/queues/{queue}/messages/{message['receipt']}")
        return messages

    async def queue_stats(self, queue: str) -> Json:
        return await self._call("GET", f"/v1/queues/{queue}/stats")

    async def queue_dead_letters(self, queue: str, limit: int) -> Json:
        return await self._call("GET", f"/v1/queues/{queue}/dead-letters", params={"limit": limit})

    async def queue_redrive(self, queue: str) -> Json:
        return await self._call("POST", f"/v1/queues/{queue}/dead-letters/redrive")

    async def deliveries(self, status: str | None, limit: int, cursor: str | None) -> Json:
        params = {"status": status, "limit": limit, "cursor": cursor}
        clean = {k: v for k, v in params.items() if v is not None}
        return await self._call("GET", "/v1/deliveries", params=clean)

    async def delivery_redrive(self, delivery_id: str | None) -> Json:
        if delivery_id is None:
            return await self._call("POST", "/v1/deliveries/redrive")
        return await self._call("POST", f"/v1/deliveries/{delivery_id}/redrive")

    async def schedules(self) -> Json:
        return await self._call("GET", "/v1/schedules")

    async def schedule_create(self, body: Json) -> Json:
        return await self._call("POST", "/v1/schedules", json=body)

    async def schedule_action(self, name: str, action: str) -> Json:
        return await self._call("POST", f"/v1/schedules/{name}/{action}")

    async def schedule_delete(self, name: str) -> bool:
        try:
            await self._call("DELETE", f"/v1/schedules/{name}")
        except OperatorError as exc:
            if str(exc).startswith("404"):
                return False
            raise
        return True


def _dump(model: Any) -> Json:
    return model.model_dump(mode="json", by_alias=True)
