"""Token scopes: what each grants, how a request's need is checked against them; pure.

A scope is `admin`, `read`, `operate`, `publish:<topic pattern>`, `start:<workflow>`,
`signal:<workflow>` or `queue:<name>` (`*` alone matches every workflow or queue). Topic
patterns follow the subscription grammar; the caller injects its validator and matcher, so this
module stays below the events layer.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from ripple.platform.errors import InvalidInput

__all__ = ["KINDS", "MAX_SCOPE_LENGTH", "SCOPE_PATTERN", "Need", "permits", "validate_scopes"]

Kind = Literal["admin", "read", "operate", "publish", "start", "signal", "queue"]

#: Scopes without an argument, and scopes that take one after a colon.
_PLAIN: Final = ("admin", "read", "operate")
_ARGUMENT: Final = ("publish", "start", "signal", "queue")
KINDS: Final = (*_PLAIN, *(f"{kind}:<...>" for kind in _ARGUMENT))
_MAX_SCOPES: Final = 100
_SEGMENT: Final = r"(?:\*|#|[a-z0-9_-]+)"
#: A scope's grammar (also the REST schema's): workflow names as `@workflow` takes them, queue
#: names as queues take them, topic patterns as subscriptions take them (at most 255
#: characters, which `MAX_SCOPE_LENGTH` bounds).
SCOPE_PATTERN: Final = (
    r"^(?:admin|read|operate"
    rf"|publish:{_SEGMENT}(?:\.{_SEGMENT})*"
    r"|(?:start|signal):(?:\*|[a-z0-9_-]{1,64})"
    r"|queue:(?:\*|[A-Za-z0-9][A-Za-z0-9_.-]{0,127}))$"
)
MAX_SCOPE_LENGTH: Final = len("publish:") + 255
_SCOPE: Final = re.compile(SCOPE_PATTERN)


@dataclass(frozen=True, slots=True)
class Need:
    """What a request needs: a `kind` and, for the argument kinds, the topic, workflow or queue.

    `str(need)` is the scope named in a 403 (`publish:order.created`, `operate`, ...)."""

    kind: Kind
    value: str | None = None

    def __str__(self) -> str:
        return self.kind if self.value is None else f"{self.kind}:{self.value}"


def validate_scopes(scopes: object, validate_pattern: Callable[[str], object]) -> list[str]:
    """`scopes` as a list, each checked; raises `InvalidInput` naming the first bad one."""
    if isinstance(scopes, str) or not isinstance(scopes, Sequence):
        raise InvalidInput("scopes must be a list such as ['publish:order.*']", field="scopes")
    if not scopes:
        raise InvalidInput(
            f"a token needs at least one scope; choose from {', '.join(KINDS)}", field="scopes"
        )
    if len(scopes) > _MAX_SCOPES:
        raise InvalidInput(f"at most {_MAX_SCOPES} scopes per token", field="scopes")
    checked: list[str] = []
    for scope in scopes:
        if not isinstance(scope, str):
            raise InvalidInput(f"scope {scope!r} is not a string", field="scopes")
        _validate_one(scope, validate_pattern)
        if scope not in checked:
            checked.append(scope)
    return checked


def _validate_one(scope: str, validate_pattern: Callable[[str], object]) -> None:
    kind, _, value = scope.partition(":")
    if kind == "publish" and value:
        try:
            validate_pattern(value)
        except InvalidInput as exc:
            raise InvalidInput(f"scope {scope!r}: {exc.message}", field="scopes") from exc
    if len(scope) > MAX_SCOPE_LENGTH or not _SCOPE.fullmatch(scope):
        raise InvalidInput(
            f"invalid scope {scope!r}: use one of {', '.join(KINDS)}, where a workflow is "
            "[a-z0-9_-]{1,64}, a queue a queue name and a pattern a topic pattern ('*' for any "
            "workflow or queue)",
            field="scopes",
        )


def permits(scopes: Iterable[str], need: Need, topic_matches: Callable[[str, str], bool]) -> bool:
    """True if any of `scopes` grants `need`.

    `admin` grants everything; `operate` grants `read` and `operate`; `publish:P` grants a
    publish to a topic `P` matches (`topic_matches(pattern, topic)`); `start:W`, `signal:W` and
    `queue:Q` grant their kind for that name or, with `*`, for any. `operate` also signals.
    """
    for scope in scopes:
        if scope == "admin":
            return True
        if scope == "operate":
            if need.kind in ("read", "operate", "signal"):
                return True
            continue
        if scope == "read":
            if need.kind == "read":
                return True
            continue
        kind, _, value = scope.partition(":")
        if kind != need.kind or need.value is None:
            continue
        if kind == "publish":
            if topic_matches(value, need.value):
                return True
        elif value in ("*", need.value):
            return True
    return False
