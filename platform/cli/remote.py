"""Operator actions over HTTP, for the CLI's `--api URL`: the remote REST API does each one.

`ApiOperator` has the methods of `ClientOperator` (ripple.platform.cli.direct, the same actions
on the database) and answers the same REST JSON shapes (camelCase dicts), which the CLI renders
or `--json`-prints. Failures raise `OperatorError` with a message fit for a terminal.
"""

from __future__ import annotations

from datetime import datetime
from types import TracebackType
from typing import Any, Self

import httpx

from ripple.platform.api.models import camel
from ripple.platform.cli.operate import OperatorError

__all__ = ["ApiOperator"]

Json = Any


class ApiOperator:
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

    async def _delete(self, path: str) -> bool:
        """DELETE `path`: False if there was nothing to delete (404), as the `Client` answers."""
        try:
            await self._call("DELETE", path)
        except OperatorError as exc:
            if str(exc).startswith("404"):
                return False
            raise
        return True

    async def publish(self, topic: str, payload: Json, idempotency_key: str | None) -> Json:
        body = {"payload": payload, "idempotencyKey": idempotency_key}
        return await self._call("POST", f"/v1/topics/{topic}/events", json=body)

    async def register_schema(self, topic: str, schema: Json, compatibility: str | None) -> Json:
        body: dict[str, Any] = {"schema": schema}
        if compatibility is not None:
            body["compatibility"] = compatibility
        response = await self._call("PUT", f"/v1/topics/{topic}/schema", json=body)
        return {**response, "created": None}

    async def check_schema(self, topic: str, schema: Json) -> Json:
        return await self._call("POST", f"/v1/topics/{topic}/schema/check", json={"schema": schema})

    async def get_schema(self, topic: str, version: int | None) -> Json:
        params = {} if version is None else {"version": version}
        try:
            return await self._call("GET", f"/v1/topics/{topic}/schema", params=params)
        except OperatorError as exc:
            if str(exc).startswith("404"):
                return None
            raise

    async def asyncapi(self) -> Json:
        return await self._call("GET", "/asyncapi.json")

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
        return await self._delete(f"/v1/subscriptions/{subscription_id}")

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
        self,
        workflow: str | None,
        status: str | None,
        limit: int,
        cursor: str | None,
        where: str | None = None,
    ) -> Json:
        params = {
            "workflow": workflow,
            "status": status,
            "limit": limit,
            "cursor": cursor,
            "where": where,
        }
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
        headers = {} if idempotency_key is None else {"Idempotency-Key": idempotency_key}
        body = {"event": event, "payload": payload}
        return await self._call("POST", "/v1/signals", json=body, headers=headers)

    async def queue_send(
        self, queue: str, body: Json, group_id: str | None, delay: float | None
    ) -> Json:
        data = {"body": body, "groupId": group_id, "delay": delay}
        return await self._call("POST", f"/v1/queues/{queue}/messages", json=data)

    async def queue_receive(
        self,
        queue: str,
        max_messages: int,
        visibility_timeout: float,
        wait: float,
        ack: bool,
        fair: bool = False,
    ) -> Json:
        data: dict[str, Any] = {
            "maxMessages": max_messages,
            "visibilityTimeout": visibility_timeout,
            "wait": wait,
        }
        if fair:
            data["fair"] = True
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

    async def endpoint(self, subscription_id: str, *, resume: bool = False) -> Json:
        path = f"/v1/subscriptions/{subscription_id}/endpoint"
        if resume:
            return await self._call("POST", f"{path}/resume")
        return await self._call("GET", path)

    async def schedules(self) -> Json:
        return await self._call("GET", "/v1/schedules")

    async def schedule_create(self, body: Json) -> Json:
        return await self._call("POST", "/v1/schedules", json=body)

    async def schedule_action(self, name: str, action: str) -> Json:
        return await self._call("POST", f"/v1/schedules/{name}/{action}")

    async def schedule_delete(self, name: str) -> bool:
        return await self._delete(f"/v1/schedules/{name}")

    async def audit(
        self, since: datetime | None, action: str | None, limit: int, cursor: str | None
    ) -> Json:
        params = {
            "since": None if since is None else since.isoformat(),
            "action": action,
            "limit": limit,
            "cursor": cursor,
        }
        clean = {k: v for k, v in params.items() if v is not None}
        return await self._call("GET", "/v1/audit", params=clean)

    # -- tokens -------------------------------------------------------------------------------

    async def token_create(self, body: Json) -> Json:
        return await self._call("POST", "/v1/tokens", json=body)

    async def tokens(self) -> Json:
        return await self._call("GET", "/v1/tokens")

    async def token_revoke(self, token_id: str) -> Json:
        return await self._call("DELETE", f"/v1/tokens/{token_id}")
