"""Run search: a parsed where clause (`ripple.workflows.runs.search_query`) as SQL over
`ripple_runs` and `ripple_run_attributes`, and the listing that applies it.

Only fixed fragments from this module are joined into the statement; every field name,
attribute name and value of the query is a bound parameter (`$n`), and comparison operators
come from a fixed map, so nothing a caller writes becomes SQL text.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from ripple.platform.errors import InvalidInput
from ripple.workflows.runs.records import Run
from ripple.workflows.runs.search_query import (
    And,
    Compare,
    Node,
    Not,
    Or,
    Value,
    parse_time,
)
from ripple.workflows.store import runs
from ripple.workflows.store.rows import Executor

__all__ = ["WhereSql", "compile_where", "list_runs_where"]

#: The query operator -> its SQL operator (the only operators that reach the statement).
_OPS: Final = {"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

_FIRST_WHERE_PARAM: Final = 8  # after the listing's own parameters (`runs.LIST_RUNS`)

#: Run columns a query may name, with the SQL type of their parameter.
_BUILTINS: Final = {
    "workflow": ("r.workflow", "text"),
    "status": ("r.status", "text"),
    "created_at": ("r.created_at", "timestamptz"),
}
#: Attribute value kind -> (typed column of ripple_run_attributes, parameter type).
_COLUMNS: Final = {
    "text": ("a.value_text", "text"),
    "num": ("a.value_num", "numeric"),
    "bool": ("a.value_bool", "boolean"),
    "time": ("a.value_time", "timestamptz"),
}
_ATTRIBUTE: Final = (
    "EXISTS (SELECT 1 FROM ripple_run_attributes a WHERE a.run_id = r.run_id "
    "AND a.name = ${name}::text AND {column} {test})"
)


def _kind(value: Value) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Decimal):
        return "num"
    if isinstance(value, datetime):
        return "time"
    return "text"


class WhereSql:
    """A where clause being compiled: the SQL text and its parameters, numbered from `first`."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.params: list[Any] = []

    def bind(self, value: Any) -> str:
        self.params.append(value)
        return str(self.first + len(self.params) - 1)

    def node(self, node: Node) -> str:
        if isinstance(node, And):
            return "(" + " AND ".join(self.node(item) for item in node.items) + ")"
        if isinstance(node, Or):
            return "(" + " OR ".join(self.node(item) for item in node.items) + ")"
        if isinstance(node, Not):
            return "(NOT " + self.node(node.item) + ")"
        if isinstance(node, Compare):
            return self._compare(node.field, node.op, (node.value,))
        return self._compare(node.field, "not in" if node.negated else "in", node.values)

    def _compare(self, field: str, op: str, values: Sequence[Value]) -> str:
        builtin = _BUILTINS.get(field)
        if builtin is not None:
            column, cast = builtin
            values = [_builtin_value(field, cast, v) for v in values]
            return column + " " + self._test(op, cast, values, field)
        kinds = {_kind(v) for v in values}
        if len(kinds) > 1:
            raise InvalidInput(
                f"the values compared with {field!r} mix types: use one type per in list",
                field="where",
            )
        kind = kinds.pop()
        column, cast = _COLUMNS[kind]
        if kind == "bool" and op not in ("=", "!=", "in", "not in"):
            raise InvalidInput(f"{field} is compared with a boolean: use = or !=", field="where")
        name = self.bind(field)
        test = self._test(op, cast, list(values), field)
        return _ATTRIBUTE.format(name=name, column=column, test=test)

    def _test(self, op: str, cast: str, values: Sequence[Any], field: str) -> str:
        if op in ("in", "not in"):
            param = self.bind(list(values))
            negate = "<> ALL" if op == "not in" else "= ANY"
            return f"{negate}(${param}::{cast}[])"
        if cast == "text" and field in ("workflow", "status") and op not in ("=", "!="):
            raise InvalidInput(f"{field} takes = != or in", field="where")
        return f"{_OPS[op]} ${self.bind(values[0])}::{cast}"


def _builtin_value(field: str, cast: str, value: Value) -> Any:
    if cast == "timestamptz":
        if isinstance(value, datetime):
            return value
        if isinstance(value, str):
            return parse_time(value, 0, value)
        raise InvalidInput(
            f'{field} is compared with a time: use "2026-01-31T12:00:00Z"', field="where"
        )
    if not isinstance(value, str):
        raise InvalidInput(f"{field} is compared with text: quote the value", field="where")
    return value


def compile_where(node: Node, first: int = _FIRST_WHERE_PARAM) -> tuple[str, list[Any]]:
    """The SQL condition of `node` (runs aliased `r`) and its parameters from `$first` on."""
    sql = WhereSql(first)
    return sql.node(node), sql.params


async def list_runs_where(
    conn: Executor,
    *,
    where: Node | None,
    workflow: str | None,
    status: str | None,
    since: datetime | None,
    until: datetime | None,
    parent_run_id: str | None,
    cursor: str | None,
    limit: int,
) -> list[Run]:
    """Runs matching `where` (None: all) and the plain filters, newest first, after `cursor`."""
    return await runs.list_runs(
        conn,
        workflow=workflow,
        status=status,
        since=since,
        until=until,
        parent_run_id=parent_run_id,
        cursor=cursor,
        limit=limit,
        where=None if where is None else compile_where(where),
    )
