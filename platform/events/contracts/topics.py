"""`Topics`: the topic schema registry as the client exposes it (`client.topics`).

Registering takes the topic's lock (its contract row) for the whole transaction, so concurrent
registrations of one topic number their versions one after the other; the version, its
judgement against the earlier ones and its audit row commit together.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, cast

import jsonschema_rs
from pydantic import BaseModel

from ripple.platform.access import audit_store
from ripple.platform.core import db
from ripple.platform.core.db import Pool, map_errors
from ripple.platform.core.logs import get_logger
from ripple.platform.errors import InvalidInput, SchemaIncompatible
from ripple.platform.events import event_store
from ripple.platform.events.contracts import schema_store
from ripple.platform.events.contracts.compatibility import Verdict, judge
from ripple.platform.events.contracts.records import (
    COMPATIBILITY_MODES,
    Compatibility,
    CompatibilityReport,
    SchemaVersion,
)
from ripple.platform.events.contracts.validation import Contracts
from ripple.platform.events.topics import validate_topic

__all__ = ["Topics", "check_compatibility", "schema_document"]

log = get_logger("ripple.contracts")

#: A schema as callers hand it in: a pydantic model class or a JSON Schema document.
SchemaInput = type[BaseModel] | Mapping[str, Any]


def schema_document(schema: Any) -> dict[str, Any]:
    """`schema` (a pydantic model class or a JSON Schema 2020-12 dict) as a JSON Schema dict;
    `InvalidInput` when it is neither or not a valid schema."""
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        document: dict[str, Any] = schema.model_json_schema()
        return document
    if not isinstance(schema, Mapping):
        raise InvalidInput(
            "schema must be a pydantic model class or a JSON Schema (draft 2020-12) object, "
            f"not {type(schema).__name__}",
            field="schema",
        )
    document = json.loads(json.dumps(schema))  # plain JSON values, a copy the caller cannot change
    declared = document.get("$schema")
    if declared is not None and "2020-12" not in str(declared):
        raise InvalidInput(
            f"schema declares $schema {declared!r}; Ripple takes JSON Schema draft 2020-12 "
            "(https://json-schema.org/draft/2020-12/schema) or no $schema",
            field="schema",
        )
    try:
        jsonschema_rs.meta.validate({**document, "$schema": _DRAFT_2020_12})
        jsonschema_rs.Draft202012Validator(document)
    except (jsonschema_rs.ValidationError, jsonschema_rs.ReferencingError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidInput(
            f"schema is not a valid JSON Schema (draft 2020-12): {first}", field="schema"
        ) from None
    return document


_DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"


def fingerprint(document: Mapping[str, Any]) -> str:
    """A hash of the schema's canonical JSON (sorted keys, no spaces)."""
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def check_mode(compatibility: Any) -> Compatibility:
    if compatibility not in COMPATIBILITY_MODES:
        raise InvalidInput(
            f"unknown compatibility {compatibility!r}; use one of {', '.join(COMPATIBILITY_MODES)}",
            field="compatibility",
        )
    return cast(Compatibility, compatibility)


async def check_compatibility(
    conn: db.Connection,
    topic: str,
    document: dict[str, Any],
    mode: Compatibility,
    previous: list[SchemaVersion],
) -> CompatibilityReport:
    """Judge `document` against `previous` under `mode`; properties an open past version did
    not declare count only when a stored event of `topic` carries them."""
    verdict: Verdict = judge(mode, document, [(v.version, v.schema) for v in previous])
    problems = list(verdict.problems)
    carried = await event_store.paths_carried(conn, topic, verdict.unseen) if verdict.unseen else []
    for path in carried:
        pointer = "".join(f"/{p}" for p in path)
        problems.append(
            f"{pointer}: an earlier version is an open model (no additionalProperties: false) "
            "and stored events carry this property, so the new schema may not be able to read "
            "them; close the model (pydantic: extra='forbid') or use compatibility 'none'"
        )
    return CompatibilityReport(not problems, problems)


class Topics:
    """Topic schemas: register, check and read them (`client.topics`)."""

    def __init__(self, pool: Pool, contracts: Contracts) -> None:
        self._pool = pool
        self._contracts = contracts

    async def register_schema(
        self, topic: str, schema: SchemaInput, compatibility: Compatibility | None = None
    ) -> SchemaVersion:
        """Register `schema` (a pydantic model class or a JSON Schema 2020-12 dict) as the next
        version of `topic`'s payload schema, setting the topic's mode when `compatibility` is
        given. The same schema again returns its existing version.

        Raises:
            SchemaIncompatible: the schema breaks the topic's compatibility rule (`problems`).
            InvalidInput: not a valid schema, topic or mode.
        """
        version, _ = await self.register(topic, schema, compatibility)
        return version

    async def register(
        self, topic: str, schema: SchemaInput, compatibility: Compatibility | None = None
    ) -> tuple[SchemaVersion, bool]:
        """`register_schema`, and whether the version is new."""
        validate_topic(topic)
        document = schema_document(schema)
        mode = None if compatibility is None else check_mode(compatibility)
        print_ = fingerprint(document)
        async with db.transaction(self._pool) as conn:
            current = await schema_store.lock_topic(conn, topic, mode)
            existing = await schema_store.find_by_fingerprint(conn, topic, print_)
            if existing is not None:
                return existing, False
            previous = await schema_store.list_schemas(conn, topic)
            report = await check_compatibility(conn, topic, document, current, previous)
            if not report.compatible:
                raise SchemaIncompatible(
                    f"the schema breaks topic {topic!r}'s {current} compatibility: "
                    + "; ".join(report.problems),
                    problems=report.problems,
                )
            version = await schema_store.insert_schema(conn, topic, document, print_)
            await audit_store.record(
                conn, "topic.schema.register", topic, {"version": version.version}
            )
        self._contracts.changed()
        log.info("topic_schema_registered", topic=topic, version=version.version)
        return version, True

    async def check_schema(self, topic: str, schema: SchemaInput) -> CompatibilityReport:
        """Whether `schema` could be registered for `topic` now, and why not (registers
        nothing)."""
        validate_topic(topic)
        document = schema_document(schema)
        with map_errors():
            async with self._pool.acquire() as conn:
                previous = await schema_store.list_schemas(conn, topic)
                if not previous:
                    return CompatibilityReport(True, [])
                if any(v.schema == document for v in previous):
                    return CompatibilityReport(True, [])
                mode = previous[-1].compatibility
                return await check_compatibility(conn, topic, document, mode, previous)

    async def set_compatibility(self, topic: str, compatibility: Compatibility) -> None:
        """Set `topic`'s compatibility mode (judges later registrations)."""
        validate_topic(topic)
        mode = check_mode(compatibility)
        async with db.transaction(self._pool) as conn:
            await schema_store.set_compatibility(conn, topic, mode)
        log.info("topic_compatibility_set", topic=topic, compatibility=mode)

    async def get_schema(self, topic: str, version: int | None = None) -> SchemaVersion | None:
        """One version of `topic`'s schema (the latest by default); None if there is none."""
        validate_topic(topic)
        with map_errors():
            async with self._pool.acquire() as conn:
                return await schema_store.get_schema(conn, topic, version)

    async def list_schemas(self, topic: str) -> list[SchemaVersion]:
        """Every version of `topic`'s schema, oldest first."""
        validate_topic(topic)
        with map_errors():
            async with self._pool.acquire() as conn:
                return await schema_store.list_schemas(conn, topic)

    async def latest_schemas(self) -> list[SchemaVersion]:
        """The newest schema of every topic that has one, ordered by topic."""
        with map_errors():
            async with self._pool.acquire() as conn:
                return await schema_store.latest_schemas(conn)
