"""`@workflow` and `WorkflowDefinition`: a workflow's name, version and options, and the types
that drive validation of its input and output. No I/O.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from ripple.platform.errors import InvalidInput
from ripple.workflows.authoring.attributes import check_declaration
from ripple.workflows.authoring.flow import (
    Concurrency,
    Debounce,
    Fairness,
    Throttle,
    flow_control_row,
)
from ripple.workflows.authoring.retry import RetryPolicy, seconds
from ripple.workflows.authoring.schedule import Schedule
from ripple.workflows.serde import NO_TYPE

if TYPE_CHECKING:
    from ripple.workflows.authoring.context import WorkflowContext

__all__ = ["WorkflowDefinition", "check_workflow_name", "workflow"]

InT = TypeVar("InT")
OutT = TypeVar("OutT")

NAME_RE = re.compile(r"^[a-z0-9_-]{1,64}$")
#: Workflow-level retry default: one attempt.
DEFAULT_RUN_RETRY = RetryPolicy(max_attempts=1)


def check_workflow_name(name: str) -> str:
    """Return `name` if it is a valid workflow name, else raise InvalidInput."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise InvalidInput(
            f"invalid workflow name {name!r}: use 1-64 characters of a-z, 0-9, '_' and '-'",
            field="workflow",
        )
    return name


@dataclass(frozen=True, eq=False)
class WorkflowDefinition(Generic[InT, OutT]):
    """A workflow function with its name, version and options (what `@workflow` returns).

    Calling it calls the function (useful in tests); run it durably with `client.start()`.
    """

    fn: Callable[..., Awaitable[OutT]]
    name: str
    version: int = 1
    retry: RetryPolicy = DEFAULT_RUN_RETRY
    retention: timedelta | None = None
    deadline: timedelta | None = None
    #: Annotation of the input parameter (NO_TYPE when unannotated), None when no input.
    input_type: Any = field(default=NO_TYPE)
    takes_input: bool = True
    output_type: Any = field(default=NO_TYPE)
    concurrency: Concurrency | None = None
    throttle: Throttle | None = None
    debounce: Debounce | None = None
    fairness: Fairness | None = None
    #: registered (named after the workflow) when a worker serving it starts
    schedule: Schedule | None = None
    #: declared search attributes {name: type name}; None: any name and type is accepted
    attributes: dict[str, str] | None = None

    @property
    def flow_control(self) -> tuple[Any, ...] | None:
        """The `ripple_flow_controls` values of its options (None: it declares none)."""
        return flow_control_row(self.concurrency, self.throttle, self.debounce, self.fairness)

    def __call__(self, ctx: WorkflowContext, *args: Any) -> Awaitable[OutT]:
        return self.fn(ctx, *args)

    def __repr__(self) -> str:
        return f"<WorkflowDefinition {self.name} v{self.version}>"


def _describe(fn: Callable[..., Any]) -> tuple[bool, Any, Any]:
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if not params:
        raise TypeError(f"workflow {fn.__name__} must take `ctx` as its first argument")
    if len(params) > 2:
        raise TypeError(f"workflow {fn.__name__} takes at most one input after `ctx`")
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    takes_input = len(params) == 2
    input_type = hints.get(params[1].name, NO_TYPE) if takes_input else NO_TYPE
    output_type = hints.get("return", NO_TYPE)
    if output_type is type(None):
        output_type = NO_TYPE
    return takes_input, input_type, output_type


OptT = TypeVar("OptT")


def _option(value: OptT | None, kind: type[OptT], name: str) -> OptT | None:
    if value is not None and not isinstance(value, kind):
        raise InvalidInput(f"{name} must be a {kind.__name__}(...)", field=name)
    return value


@overload
def workflow(fn: Callable[..., Awaitable[OutT]], /) -> WorkflowDefinition[Any, OutT]: ...


@overload
def workflow(
    *,
    name: str | None = None,
    version: int = 1,
    retry: RetryPolicy | None = None,
    retention: timedelta | float | None = None,
    deadline: timedelta | float | None = None,
    concurrency: Concurrency | None = None,
    throttle: Throttle | None = None,
    debounce: Debounce | None = None,
    fairness: Fairness | None = None,
    schedule: Schedule | None = None,
    attributes: Mapping[str, type] | None = None,
) -> Callable[[Callable[..., Awaitable[OutT]]], WorkflowDefinition[Any, OutT]]: ...


def workflow(
    fn: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    version: int = 1,
    retry: RetryPolicy | None = None,
    retention: timedelta | float | None = None,
    deadline: timedelta | float | None = None,
    concurrency: Concurrency | None = None,
    throttle: Throttle | None = None,
    debounce: Debounce | None = None,
    fairness: Fairness | None = None,
    schedule: Schedule | None = None,
    attributes: Mapping[str, type] | None = None,
) -> Any:
    """Declare a durable workflow: `async def f(ctx: WorkflowContext, inp: In) -> Out`.

    Args:
        name: workflow name (`[a-z0-9_-]{1,64}`); defaults to the function's name.
        version: the code version new runs record; workers only claim versions they serve.
        retry: workflow-level retry (default: 1 attempt, no retry).
        retention: how long terminal runs are kept (default 30 days, capped by settings).
        deadline: default deadline of a run, counted from its start.
        concurrency: at most `limit` active runs per key (`Concurrency(limit, key)`).
        throttle: at most `limit` starts per `period` and key (`Throttle(limit, period, key)`).
        debounce: collapse starts per key into one run (`Debounce(period, key, max_wait)`).
        fairness: claim pending runs in a weighted round robin across keys
            (`Fairness(key, weights)`).
        schedule: start runs on a cadence (`Schedule(cron=... | every=...)`).
        attributes: the search attributes runs may set, `{name: str | int | float | bool |
            datetime}`; `ctx.set_attributes` then refuses other names and types.
    """

    def wrap(func: Callable[..., Awaitable[Any]]) -> WorkflowDefinition[Any, Any]:
        if not inspect.iscoroutinefunction(func):
            raise TypeError(f"workflow {func.__name__} must be an `async def` function")
        if not isinstance(version, int) or version < 1:
            raise TypeError("workflow version must be an integer >= 1")
        takes_input, input_type, output_type = _describe(func)
        return WorkflowDefinition(
            fn=func,
            name=check_workflow_name(name or func.__name__),
            version=version,
            retry=retry or DEFAULT_RUN_RETRY,
            retention=None if retention is None else timedelta(seconds=seconds(retention)),
            deadline=None if deadline is None else timedelta(seconds=seconds(deadline)),
            input_type=input_type,
            takes_input=takes_input,
            output_type=output_type,
            concurrency=_option(concurrency, Concurrency, "concurrency"),
            throttle=_option(throttle, Throttle, "throttle"),
            debounce=_option(debounce, Debounce, "debounce"),
            fairness=_option(fairness, Fairness, "fairness"),
            schedule=_option(schedule, Schedule, "schedule"),
            attributes=check_declaration(attributes),
        )

    if fn is not None:
        return wrap(fn)
    return wrap
