"""Settings for every Ripple process, read from `RIPPLE_*` environment variables.

Owns validation of configuration only; it opens no connections. A bad value fails at start with a
`ConfigError` that names the variable and what it accepts.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ripple.platform.core.durations import parse_duration
from ripple.platform.errors import ConfigError

if TYPE_CHECKING:
    from ripple.platform.core.wake import RedisEndpoint

__all__ = ["Settings", "load_settings"]


def _split_csv(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    """Everything a Ripple process can be configured with (env prefix `RIPPLE_`)."""

    model_config = SettingsConfigDict(env_prefix="RIPPLE_", extra="ignore", frozen=True)

    #: Postgres DSN. None: `ripple dev` starts an embedded Postgres under `.ripple/`.
    database_url: str | None = None
    #: Postgres DSN that bypasses a transaction-mode pooler (PgBouncer), for what needs a
    #: session: the migration lock. None: migrations use `database_url`.
    database_direct_url: str | None = None
    #: Postgres DSN of a read replica for list calls and dashboard pages (which may then lag
    #: the primary by the replication delay). None: they read the primary.
    database_read_url: str | None = None
    #: `transaction` when `database_url` goes through a transaction-mode pooler (PgBouncer
    #: `pool_mode=transaction`, RDS Proxy, Supavisor): no named prepared statements, no
    #: session settings at connect (they become `SET LOCAL`), migrations need
    #: `database_direct_url`. `none`: a direct connection.
    database_pooler: Literal["none", "transaction"] = "none"
    #: Redis URL used only for wake-up hints. None: no Redis, wake-ups fall back to polling.
    redis_url: str | None = None
    #: Redis Sentinels (`host:port`, comma-separated); the wake layer then connects to the
    #: master they name (`redis_sentinel_master`) and follows a failover. Overrides `redis_url`.
    redis_sentinels: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: The master's name in Sentinel (`sentinel monitor <name> ...`).
    redis_sentinel_master: str | None = None
    #: Prefix of every Redis channel this deployment uses (lets several share one Redis).
    redis_prefix: str = "ripple:"
    pool_min_size: Annotated[int, Field(ge=0, le=1000)] = 2
    pool_max_size: Annotated[int, Field(ge=1, le=1000)] = 20
    #: Seconds a call may wait for the database (a connect, a free connection, a statement, a
    #: group commit) before it fails with `Unavailable` (the API answers 503 with
    #: `Retry-After`) instead of hanging in an outage, a frozen server included.
    db_timeout: Annotated[float, Field(gt=0, le=3600)] = 5.0
    #: Seconds a worker's own database statement (journal commit, heartbeat, release) may take.
    #: None: the lease (`lease_seconds`); a write slower than that is fenced out anyway, and a
    #: healthy commit slower than `db_timeout` must not be cancelled (its step would run again).
    worker_db_timeout: Annotated[float | None, Field(gt=0, le=3600)] = None
    #: Seconds a claimed run or delivery stays leased without a heartbeat.
    lease_seconds: Annotated[float, Field(gt=0, le=3600)] = 30.0
    #: Fallback poll interval in seconds: the longest a lost wake-up hint delays work.
    poll_interval: Annotated[float, Field(gt=0, le=60)] = 1.0
    #: Seconds a stopping worker lets in-flight steps finish before releasing them.
    shutdown_grace: Annotated[float, Field(ge=0, le=3600)] = 10.0
    #: Bearer tokens accepted by the API. Empty: no auth, and `serve` binds to loopback only.
    api_tokens: Annotated[list[str], NoDecode] = Field(default_factory=list)
    #: CIDRs webhooks may target although they are not public (e.g. `127.0.0.0/8`).
    webhook_allowed_networks: Annotated[list[str], NoDecode] = Field(default_factory=list)
    webhook_timeout: Annotated[float, Field(gt=0, le=300)] = 15.0
    #: The `source` of the CloudEvents webhooks send (`format="cloudevents"`): a URI-reference.
    event_source: Annotated[str, Field(min_length=1, max_length=1024)] = "ripple"
    webhook_concurrency: Annotated[int, Field(ge=1, le=10_000)] = 50
    webhook_endpoint_concurrency: Annotated[int, Field(ge=1, le=1000)] = 8
    #: Open connections per webhook origin (scheme, host, port) across all its subscriptions.
    webhook_origin_concurrency: Annotated[int, Field(ge=1, le=10_000)] = 16
    #: Seconds of continuous failure after which a webhook subscription is disabled (5 days).
    webhook_disable_after: Annotated[float, Field(gt=0)] = 5 * 24 * 3600.0
    #: Consecutive failed attempts after which a webhook endpoint's circuit opens.
    webhook_circuit_failures: Annotated[int, Field(ge=1, le=1000)] = 5
    #: Seconds between the probes (one delivery each) of an endpoint whose circuit is open.
    webhook_circuit_probe_interval: Annotated[float, Field(gt=0, le=86_400)] = 30.0
    #: Largest request body the API accepts, in bytes (413 above it).
    max_body_bytes: Annotated[int, Field(ge=1024, le=64 * 1024 * 1024)] = 1024 * 1024
    #: Deepest nesting of JSON accepted in payloads and inputs.
    max_json_depth: Annotated[int, Field(ge=2, le=256)] = 32
    #: Step executions a run may make before it fails (runaway-loop guard).
    max_steps_per_run: Annotated[int, Field(ge=1, le=1_000_000)] = 1000
    #: Times a run may be recovered after its worker was lost (killed, OOM, stalled past its
    #: lease) while it ran alone as a suspect, before it fails with WorkerLost. Counted apart
    #: from step retry attempts.
    max_recoveries: Annotated[int, Field(ge=1, le=1_000_000)] = 100
    #: Largest page a list call returns.
    max_page_size: Annotated[int, Field(ge=1, le=10_000)] = 500
    #: Days events are kept before the sweeper deletes them.
    event_retention_days: Annotated[float, Field(gt=0)] = 7.0
    #: Days a queue's dead letters are kept after they died: retention drops their partitions
    #: whole, so they outlive it by up to one `partition_interval`.
    dead_letter_retention_days: Annotated[float, Field(gt=0)] = 14.0
    #: Time range of one partition of the event, webhook delivery and attempt tables (`1d`,
    #: `6h`, or seconds): retention drops whole partitions, so events outlive their retention by
    #: up to one interval.
    partition_interval: Annotated[float, Field(ge=60, le=31 * 86_400)] = 86_400.0
    #: Partitions the sweeper keeps created ahead of now (each `partition_interval` long).
    partitions_ahead: Annotated[int, Field(ge=2, le=1000)] = 7
    #: Longest retention a workflow may ask for, in days.
    max_run_retention_days: Annotated[float, Field(gt=0)] = 90.0
    #: Retention of terminal runs whose workflow declares none (also capped by the maximum).
    default_run_retention_days: Annotated[float, Field(gt=0)] = 30.0
    #: Days audit trail entries are kept before the sweeper deletes them.
    audit_retention_days: Annotated[float, Field(gt=0)] = 365.0
    #: Seconds between two retention sweeps of a worker's sweeper.
    sweep_interval: Annotated[float, Field(gt=0, le=86_400)] = 60.0
    #: Rows one sweeper statement deletes at most (bounded batches keep locks and WAL short).
    sweep_batch_size: Annotated[int, Field(ge=1, le=100_000)] = 500
    #: Seconds between refreshes of the gauges computed from Postgres (queue depth, stranded runs).
    metrics_interval: Annotated[float, Field(gt=0, le=3600)] = 15.0
    #: Base URL of the API as people reach it (`https://ripple.example.com`), put before
    #: `/approve/{token}` in approval links; unset: links are paths.
    public_url: str | None = None
    #: Human-readable console logs instead of JSON lines.
    log_console: bool = False
    log_level: str = "info"

    @field_validator("partition_interval", mode="before")
    @classmethod
    def _interval(cls, value: Any) -> Any:
        if isinstance(value, str):
            seconds = parse_duration(value)
            return value if seconds is None else seconds
        return value

    @field_validator("api_tokens", "webhook_allowed_networks", "redis_sentinels", mode="before")
    @classmethod
    def _csv(cls, value: Any) -> Any:
        return _split_csv(value)

    @field_validator("webhook_allowed_networks")
    @classmethod
    def _cidrs(cls, value: list[str]) -> list[str]:
        for cidr in value:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as exc:
                raise ValueError(f"{cidr!r} is not a CIDR such as 127.0.0.0/8") from exc
        return value

    @field_validator("database_url", "database_direct_url", "database_read_url")
    @classmethod
    def _pg_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("postgres://", "postgresql://")):
            raise ValueError("must be a postgresql:// URL")
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis://, rediss:// or unix:// URL")
        return value

    @field_validator("redis_sentinels")
    @classmethod
    def _sentinels(cls, value: list[str]) -> list[str]:
        for address in value:
            host, _, port = address.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"{address!r} is not host:port, such as 10.0.0.5:26379")
        return value

    @field_validator("log_level")
    @classmethod
    def _level(cls, value: str) -> str:
        if value.lower() not in {"debug", "info", "warning", "error"}:
            raise ValueError("must be one of debug, info, warning, error")
        return value.lower()

    @model_validator(mode="after")
    def _sentinel_master(self) -> Settings:
        if self.redis_sentinels and not self.redis_sentinel_master:
            raise ValueError(
                "RIPPLE_REDIS_SENTINELS needs RIPPLE_REDIS_SENTINEL_MASTER, the master's name"
            )
        return self

    def redis_endpoint(self) -> RedisEndpoint:
        """Where the wake layer's Redis is: Sentinel when configured, else `redis_url`."""
        from ripple.platform.core.wake import RedisEndpoint

        sentinels = tuple(
            (host, int(port)) for host, _, port in (a.rpartition(":") for a in self.redis_sentinels)
        )
        if sentinels:
            return RedisEndpoint(sentinels=sentinels, master=self.redis_sentinel_master)
        return RedisEndpoint(url=self.redis_url)


def load_settings(**overrides: Any) -> Settings:
    """Read settings from the environment, with keyword overrides; raise `ConfigError` if bad."""
    clean = {key: value for key, value in overrides.items() if value is not None}
    try:
        return Settings(**clean)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            if not err["loc"]:  # a rule across settings names them in its message
                problems.append(err["msg"].removeprefix("Value error, "))
                continue
            field = str(err["loc"][0])
            problems.append(f"RIPPLE_{field.upper()}: {err['msg']} (got {err.get('input')!r})")
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
