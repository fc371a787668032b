"""`Contracts`: each topic's latest schema, compiled, for validating payloads and matches.

A per-process cache of every topic's latest schema version with its compiled validator
(jsonschema-rs, compiled once per (topic, version); `python -m bench.validators` compares it
with jsonschema and fastjsonschema). Invalidated by a `SchemasChanged` hint from the process
that registered a version and, in case a hint is lost, checked at most once per poll interval:
versions are only ever added, so a count of them tells whether the schemas must be re-read.
Reads the schema tables only through `schema_store`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ripple.platform.core import db
from ripple.platform.core.config import Settings
from ripple.platform.core.deadlines import Deadline, bounded
from ripple.platform.core.logs import get_logger
from ripple.platform.core.wake import CH_SCHEMAS, Listener, NullWaker, SchemasChanged
from ripple.platform.errors import InvalidInput
from ripple.platform.events.contracts import schema_store
from ripple.platform.events.contracts.paths import undeclared_paths
from ripple.platform.events.contracts.records import SchemaVersion
from ripple.platform.events.topics import compile_pattern

if TYPE_CHECKING:
    import jsonschema_rs

__all__ = ["CompiledSchema", "Contracts", "compile_schema", "violations"]

log = get_logger("ripple.contracts")

#: Most violations one refusal lists.
MAX_VIOLATIONS: Final = 20


@dataclass(frozen=True, slots=True)
class CompiledSchema:
    """A topic's latest schema version, ready to validate."""

    version: SchemaVersion
    validator: jsonschema_rs.Validator

    def check(self, payload: Any, *, field: str = "payload", text: str | None = None) -> None:
        """Raise `InvalidInput` naming each violation's JSON pointer, if `payload` breaks it.

        `text`: the payload's JSON text, validated instead when `payload` holds values that
        are not JSON types (which publish encodes)."""
        try:
            if self.validator.is_valid(payload):
                return
        except (ValueError, TypeError):
            if text is None:
                raise
            payload = json.loads(text)
            if self.validator.is_valid(payload):
                return
        found = violations(self.validator, payload)
        raise InvalidInput(
            f"{field} does not match the schema of topic {self.version.topic!r} "
            f"(version {self.version.version}): " + "; ".join(found),
            field=field,
        )

    def check_match(self, match: Mapping[str, Any], *, field: str) -> None:
        """Raise `InvalidInput` when `match` names a key path the schema does not declare."""
        missing = undeclared_paths(self.version.schema, match)
        if missing:
            raise InvalidInput(
                f"{field} names {', '.join(missing)}, which the schema of topic "
                f"{self.version.topic!r} (version {self.version.version}) does not declare; "
                "check the spelling against get_schema()",
                field=field,
            )


def compile_schema(schema: Mapping[str, Any]) -> jsonschema_rs.Validator:
    """A validator for a JSON Schema 2020-12 document (formats checked)."""
    import jsonschema_rs  # only processes that compile a schema load the validator

    return jsonschema_rs.Draft202012Validator(dict(schema), validate_formats=True)


def violations(validator: jsonschema_rs.Validator, payload: Any) -> list[str]:
    """Each violation as "<JSON pointer>: <message>" (at most `MAX_VIOLATIONS`)."""
    found = []
    for error in validator.iter_errors(payload):
        pointer = "".join(
            "/" + str(p).replace("~", "~0").replace("/", "~1") for p in error.instance_path
        )
        found.append(f"{pointer or '/'}: {_message(error)}")
        if len(found) >= MAX_VIOLATIONS:
            break
    return found


def _message(error: jsonschema_rs.ValidationError) -> str:
    """The violation in the words of Python's jsonschema for the common kinds (values as
    Python reprs: `'x' is not of type 'integer'`), else jsonschema-rs's own message."""
    import jsonschema_rs

    kind = error.kind
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Type):
        return f"{error.instance!r} is not of type {', '.join(repr(t) for t in kind.types)}"
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
        return f"{kind.property!r} is a required property"
    return str(error.message)


class Contracts:
    """The latest schema of every topic, compiled (read by publish and match checks).

    Args:
        pool: the database pool.
        waker: the wake layer (`SchemasChanged` hints).
        settings: for the poll interval.
    """

    def __init__(self, pool: db.Pool, waker: NullWaker, settings: Settings) -> None:
        self._pool = pool
        self._waker = waker
        self._settings = settings
        self._latest: dict[str, CompiledSchema] | None = None
        #: Compiled validators by (topic, version): a reload compiles only new versions.
        self._compiled: dict[tuple[str, int], CompiledSchema] = {}
        self._checked_at = 0.0
        #: Schema versions in the database when `_latest` was read (see `schema_count`).
        self._count = -1
        self._listener: Listener | None = None
        self._listening = False
        self._exits = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()

    async def latest(self, topic: str, deadline: Deadline | None = None) -> CompiledSchema | None:
        """`topic`'s latest schema, compiled; None when it has none."""
        return (await self._current(deadline)).get(topic)

    async def check(
        self,
        topic: str,
        payload: Any,
        deadline: Deadline | None = None,
        *,
        field: str = "payload",
        text: str | None = None,
    ) -> int | None:
        """Validate `payload` against `topic`'s latest schema (`InvalidInput` naming each
        violation); the version validated against, None when the topic has no schema."""
        compiled = (await self._current(deadline)).get(topic)
        if compiled is None:
            return None
        compiled.check(payload, field=field, text=text)
        return compiled.version.version

    async def check_match(self, topic: str, match: Mapping[str, Any] | None, *, field: str) -> None:
        """`InvalidInput` when `match` names a property `topic`'s schema does not declare."""
        if not match:
            return
        compiled = await self.latest(topic)
        if compiled is not None:
            compiled.check_match(match, field=field)

    async def check_filter(self, pattern: str, filter: Mapping[str, Any] | None) -> None:
        """`InvalidInput` when a subscription filter names a property that no schema of the
        topics `pattern` matches declares (patterns matching no topic with a schema pass)."""
        if not filter:
            return
        compiled = compile_pattern(pattern)
        schemas = [c for t, c in (await self._current(None)).items() if compiled.matches(t)]
        if not schemas:
            return
        missing = [set(undeclared_paths(c.version.schema, filter)) for c in schemas]
        common = sorted(set.intersection(*missing))
        if common:
            topics = ", ".join(repr(c.version.topic) for c in schemas)
            raise InvalidInput(
                f"filter names {', '.join(common)}, which the schema of {topics} does not "
                "declare; check the spelling against get_schema()",
                field="filter",
            )

    def changed(self) -> None:
        """A version was registered here: drop the cache and tell the other processes."""
        self._latest = None
        self._waker.notify(SchemasChanged())

    async def close(self) -> None:
        """Unregister the change listener (before the waker closes)."""
        self._listener = None
        self._listening = False
        self._latest = None
        await self._exits.aclose()

    async def _current(self, deadline: Deadline | None) -> dict[str, CompiledSchema]:
        if not self._listening:
            self._listening = True
            self._listener = await self._exits.enter_async_context(self._waker.listen(CH_SCHEMAS))
        if self._listener is not None and self._listener.take():
            self._latest = None
        current = self._latest
        if (
            current is not None
            and time.monotonic() - self._checked_at < self._settings.poll_interval
        ):
            return current
        return await bounded(self._reload(current), deadline)

    async def _reload(self, current: dict[str, CompiledSchema] | None) -> dict[str, CompiledSchema]:
        async with self._lock:
            fresh = time.monotonic() - self._checked_at < self._settings.poll_interval
            if self._latest is not None and (self._latest is not current or fresh):
                return self._latest
            with db.map_errors():
                async with self._pool.acquire() as conn:
                    count = await schema_store.schema_count(conn)
                    if current is not None and current is self._latest and count == self._count:
                        self._checked_at = time.monotonic()
                        return current
                    versions = await schema_store.latest_schemas(conn)
            self._count = count
            latest = {}
            for version in versions:
                key = (version.topic, version.version)
                compiled = self._compiled.get(key)
                if compiled is None:
                    compiled = CompiledSchema(version, compile_schema(version.schema))
                    self._compiled[key] = compiled
                latest[version.topic] = compiled
            self._latest = latest
            self._checked_at = time.monotonic()
            return latest
