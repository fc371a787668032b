"""Subscription targets: where a fanned-out event goes (a queue, a webhook, a workflow).

Pydantic models discriminated by `type`, constructible positionally as API.md shows
(`QueueTarget("audit")`). `to_row()` is the JSON form stored in `ripple_subscriptions.target`.
Targets only describe; each kind's `validate()` (in its module) decides what is acceptable.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    WithJsonSchema,
    field_validator,
)

from ripple.platform.core.limits import RateLimit
from ripple.platform.errors import InvalidInput
from ripple.subscribers.webhooks.signing import SECRET_PATTERN, decode_secret, generate_secret
from ripple.workflows.authoring.retry import RetryPolicy

__all__ = [
    "DEFAULT_MAX_IN_FLIGHT",
    "MAX_IN_FLIGHT",
    "WEBHOOK_FORMATS",
    "QueueTarget",
    "Target",
    "WebhookFormat",
    "WebhookTarget",
    "WorkflowTarget",
    "new_webhook_secret",
    "rate_limit_of",
    "rate_limit_row",
]


def new_webhook_secret() -> str:
    """A fresh Standard Webhooks secret: `whsec_` + base64 of 24 random bytes."""
    return generate_secret()


#: The JSON form of a retry policy: its fields' JSON types and the bounds `RetryPolicy` checks.
_RETRY_FIELDS: Final[dict[str, dict[str, Any]]] = {
    "maxAttempts": {"type": "integer", "minimum": 0},
    "initialInterval": {"type": "number", "minimum": 0},
    "backoffCoefficient": {"type": "number", "minimum": 1},
    "maxInterval": {"type": "number", "minimum": 0},
    "jitter": {"type": "number", "minimum": 0, "maximum": 1},
    "nonRetryable": {"type": "array", "items": {"type": "string"}},
}


def _json_type_problem(data: dict[str, Any]) -> str | None:
    """The first field of a retry policy's JSON form whose JSON type is wrong, described."""
    for name, spec in _RETRY_FIELDS.items():
        if name not in data:
            continue
        value = data[name]
        if spec["type"] == "array":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        else:
            number = isinstance(value, int | float) and not isinstance(value, bool)
            integral = spec["type"] == "number" or (number and float(value).is_integer())
            ok = number and integral
        if not ok:
            return f"{name} must be a JSON {spec['type']}, got {value!r}"
    return None


def _to_policy(value: Any) -> RetryPolicy | None:
    if value is None or isinstance(value, RetryPolicy):
        return value
    if isinstance(value, dict):
        problem = _json_type_problem(value)
        if problem is not None:
            raise ValueError(f"invalid retry policy: {problem}")
        try:
            return RetryPolicy.from_json(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"invalid retry policy: {exc}") from exc
    raise ValueError("retry must be a RetryPolicy or its JSON form (maxAttempts, ...)")


_Retry = Annotated[
    RetryPolicy | None,
    PlainValidator(_to_policy),
    PlainSerializer(lambda p: p.to_json() if p is not None else None),
    WithJsonSchema(
        {
            "type": "object",
            "nullable": True,
            "properties": _RETRY_FIELDS,
        }
    ),
]


def rate_limit_of(value: Any) -> RateLimit | None:
    """A webhook target's rate limit from a `RateLimit` or its stored form `{limit,
    perSeconds}` (`per` also read; the period defaults to a second). Raises `InvalidInput`."""
    if value is None or isinstance(value, RateLimit):
        return value
    if isinstance(value, dict) and set(value) <= {"limit", "perSeconds", "per"}:
        per = value.get("perSeconds", value.get("per", 1.0))
        return RateLimit(value.get("limit"), per)  # type: ignore[arg-type]
    raise InvalidInput(
        "webhook `rateLimit` must be {limit, perSeconds}, e.g. {limit: 100, perSeconds: 1}",
        field="rateLimit",
    )


def rate_limit_row(limit: RateLimit) -> dict[str, Any]:
    """The stored (and wire) form of a webhook target's rate limit."""
    return {"limit": limit.limit, "perSeconds": limit.seconds}


def _to_rate_limit(value: Any) -> RateLimit | None:
    try:
        return rate_limit_of(value)
    except InvalidInput as exc:
        raise ValueError(f"invalid rate limit: {exc}") from exc


_Rate = Annotated[
    RateLimit | None,
    PlainValidator(_to_rate_limit),
    PlainSerializer(lambda r: rate_limit_row(r) if r is not None else None),
    WithJsonSchema(
        {
            "type": "object",
            "nullable": True,
            "properties": {
                "limit": {"type": "integer", "minimum": 1},
                "perSeconds": {"type": "number", "exclusiveMinimum": 0},
            },
            "required": ["limit"],
        }
    ),
]

#: Deliveries one webhook subscription may have in flight when its target does not say.
DEFAULT_MAX_IN_FLIGHT: Final = 10
#: Largest `maxInFlight` a webhook target may ask for.
MAX_IN_FLIGHT: Final = 1000
#: A webhook's body format: Ripple's `{type, timestamp, data}`, a structured CloudEvent, or a
#: binary one (`ce-*` headers, body = the payload).
WebhookFormat = Literal["ripple", "cloudevents", "cloudevents-binary"]
#: The webhook body formats, the default first.
WEBHOOK_FORMATS: Final[tuple[str, ...]] = get_args(WebhookFormat)


class _Target(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    def to_row(self) -> dict[str, Any]:
        """The JSON form stored with the subscription (always with `type`)."""
        return self.model_dump(mode="json", exclude_none=True)


class QueueTarget(_Target):
    """Deliver each event as a message on the durable queue `queue` (body = payload)."""

    type: Literal["queue"] = "queue"
    # The pattern documents `validate_queue_name`, which enforces it when subscribing.
    queue: str = Field(
        min_length=1, json_schema_extra={"pattern": r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"}
    )

    def __init__(self, queue: str | None = None, /, **data: Any) -> None:
        if queue is not None:
            data["queue"] = queue
        super().__init__(**data)


class WorkflowTarget(_Target):
    """Start one run of `workflow` per event (input = payload), idempotent per event."""

    type: Literal["workflow"] = "workflow"
    # The pattern documents the workflow name rule, which subscribing enforces.
    workflow: str = Field(min_length=1, json_schema_extra={"pattern": r"^[a-z0-9_-]{1,64}$"})

    def __init__(self, workflow: Any = None, /, **data: Any) -> None:
        if workflow is not None:
            # A WorkflowDefinition (or anything with a `name`) stands for its name.
            data["workflow"] = workflow if isinstance(workflow, str) else workflow.name
        super().__init__(**data)


class WebhookTarget(_Target):
    """POST each event to `url`, signed with `secret` (Standard Webhooks), retried per `retry`."""

    type: Literal["webhook"] = "webhook"
    url: str = Field(min_length=1)
    secret: str = Field(
        default_factory=new_webhook_secret,
        # Documents the validator's rule; the validator's error says what is wrong.
        json_schema_extra={"pattern": SECRET_PATTERN},
    )
    retry: _Retry = None
    timeout: float | None = Field(default=None, gt=0, le=300)
    #: The body (`WebhookFormat`). Standard Webhooks signatures in every format.
    format: WebhookFormat = "ripple"
    #: Most deliveries of this subscription in flight at once, across every dispatcher.
    max_in_flight: int = Field(
        default=DEFAULT_MAX_IN_FLIGHT, ge=1, le=MAX_IN_FLIGHT, alias="maxInFlight"
    )
    #: Most deliveries started per period, across every dispatcher (None: no limit).
    rate_limit: _Rate = Field(default=None, alias="rateLimit")

    model_config = ConfigDict(populate_by_name=True)

    def __init__(self, url: str | None = None, /, **data: Any) -> None:
        if url is not None:
            data["url"] = url
        super().__init__(**data)

    def to_row(self) -> dict[str, Any]:
        """The stored form (camelCase limits); the default `format` is left out, so rows stay
        as they were."""
        row = self.model_dump(mode="json", exclude_none=True, by_alias=True)
        if row.get("format") == "ripple":
            del row["format"]
        return row

    @field_validator("secret")
    @classmethod
    def _secret(cls, value: str) -> str:
        decode_secret(value)  # the one secret rule (signing.py); raises ValueError saying why
        return value


Target = Annotated[QueueTarget | WebhookTarget | WorkflowTarget, Field(discriminator="type")]
