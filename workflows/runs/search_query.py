"""The run search language: `customer = "acme" and (amount > 100 or vip = true)` parsed into a
small tree the workflow store turns into parameterized SQL. Pure: no I/O, no SQL.

Grammar (keywords case-insensitive; `&&`, `||`, `!` and `==` also accepted):

    expr       := term ("or" term)*
    term       := factor ("and" factor)*
    factor     := "not" factor | "(" expr ")" | comparison
    comparison := name op value | name ["not"] "in" "[" value ("," value)* "]"
    op         := "=" | "!=" | "<" | "<=" | ">" | ">="
    value      := "string" | 'string' | number | true | false | timestamp("ISO-8601")

A hand grammar rather than a CEL library: CEL's evaluator works on values in Python, not on
SQL, so only its parser would serve, and this language is the subset that maps to indexes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Final

from ripple.platform.errors import InvalidInput

__all__ = [
    "BUILTIN_FIELDS",
    "And",
    "Compare",
    "In",
    "Node",
    "Not",
    "Or",
    "Value",
    "parse_where",
]

#: Fields of the run itself; every other name is a search attribute.
BUILTIN_FIELDS: Final = frozenset({"workflow", "status", "created_at"})
MAX_LENGTH: Final = 4096
MAX_DEPTH: Final = 32
MAX_IN: Final = 100

Value = str | Decimal | bool | datetime


@dataclass(frozen=True, slots=True)
class Compare:
    field: str
    op: str
    value: Value


@dataclass(frozen=True, slots=True)
class In:
    field: str
    values: tuple[Value, ...]
    negated: bool


@dataclass(frozen=True, slots=True)
class Not:
    item: Node


@dataclass(frozen=True, slots=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Or:
    items: tuple[Node, ...]


Node = Compare | In | Not | And | Or

_TOKEN: Final = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<number>-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?)
  | (?P<op>==|!=|<=|>=|&&|\|\||[=<>!(),\[\]])
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.VERBOSE,
)
_ESCAPES: Final = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}
_COMPARE: Final = frozenset({"=", "==", "!=", "<", "<=", ">", ">="})


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str
    pos: int


def _fail(query: str, pos: int, what: str) -> InvalidInput:
    near = query[pos : pos + 20] or "end of query"
    return InvalidInput(
        f"invalid where at position {pos + 1}: {what} (near {near!r}); see docs/search.md",
        field="where",
    )


def _tokens(query: str) -> list[_Token]:
    out: list[_Token] = []
    pos = 0
    while pos < len(query):
        match = _TOKEN.match(query, pos)
        if match is None:
            raise _fail(query, pos, f"unexpected character {query[pos]!r}")
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            text = match.group()
            if kind == "name" and text.lower() in {"and", "or", "not", "in", "true", "false"}:
                kind, text = "word", text.lower()
            out.append(_Token(kind, text, pos))
        pos = match.end()
    out.append(_Token("end", "", len(query)))
    return out


def _unquote(query: str, token: _Token) -> str:
    body = token.text[1:-1]
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise _fail(query, token.pos + i + 1, f"unknown escape \\{nxt}")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out.append(ch)
        i += 1
    text = "".join(out)
    if "\x00" in text:
        raise _fail(query, token.pos, "strings must not contain NUL")
    return text


class _Parser:
    def __init__(self, query: str) -> None:
        self.query = query
        self.tokens = _tokens(query)
        self.i = 0
        self.depth = 0

    @property
    def token(self) -> _Token:
        return self.tokens[self.i]

    def _is(self, *texts: str) -> bool:
        return self.token.kind in ("op", "word") and self.token.text in texts

    def _expect(self, text: str) -> None:
        if not self._is(text):
            raise _fail(self.query, self.token.pos, f"expected {text!r}")
        self.i += 1

    def parse(self) -> Node:
        node = self.expr()
        if self.token.kind != "end":
            raise _fail(self.query, self.token.pos, "expected 'and', 'or' or the end")
        return node

    def expr(self) -> Node:
        items = [self.term()]
        while self._is("or", "||"):
            self.i += 1
            items.append(self.term())
        return items[0] if len(items) == 1 else Or(tuple(items))

    def term(self) -> Node:
        items = [self.factor()]
        while self._is("and", "&&"):
            self.i += 1
            items.append(self.factor())
        return items[0] if len(items) == 1 else And(tuple(items))

    def factor(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _fail(self.query, self.token.pos, f"nested deeper than {MAX_DEPTH}")
        try:
            if self._is("not", "!"):
                self.i += 1
                return Not(self.factor())
            if self._is("("):
                self.i += 1
                node = self.expr()
                self._expect(")")
                return node
            return self.comparison()
        finally:
            self.depth -= 1

    def comparison(self) -> Node:
        token = self.token
        if token.kind != "name":
            raise _fail(self.query, token.pos, "expected a field or attribute name")
        self.i += 1
        field = token.text
        if self._is("not") and self.tokens[self.i + 1].text == "in":
            self.i += 2
            return In(field, self.values(), negated=True)
        if self._is("in"):
            self.i += 1
            return In(field, self.values(), negated=False)
        if not (self.token.kind == "op" and self.token.text in _COMPARE):
            raise _fail(self.query, self.token.pos, "expected =, !=, <, <=, >, >= or in")
        op = "=" if self.token.text == "==" else self.token.text
        self.i += 1
        return Compare(field, op, self.value())

    def values(self) -> tuple[Value, ...]:
        start = self.token.pos
        closing = "]" if self._is("[") else ")"
        if not self._is("[", "("):
            raise _fail(self.query, self.token.pos, "expected '[' after in")
        self.i += 1
        values = [self.value()]
        while self._is(","):
            self.i += 1
            values.append(self.value())
        self._expect(closing)
        if len(values) > MAX_IN:
            raise _fail(self.query, start, f"in lists hold at most {MAX_IN} values")
        return tuple(values)

    def value(self) -> Value:
        token = self.token
        self.i += 1
        if token.kind == "string":
            return _unquote(self.query, token)
        if token.kind == "number":
            try:
                return Decimal(token.text)
            except InvalidOperation:  # pragma: no cover - the token pattern admits none
                raise _fail(self.query, token.pos, "invalid number") from None
        if token.kind == "word" and token.text in ("true", "false"):
            return token.text == "true"
        if token.kind == "name" and token.text == "timestamp":
            self._expect("(")
            inner = self.token
            if inner.kind != "string":
                raise _fail(self.query, inner.pos, "timestamp() takes an ISO-8601 string")
            self.i += 1
            self._expect(")")
            return parse_time(self.query, inner.pos, _unquote(self.query, inner))
        raise _fail(
            self.query,
            token.pos,
            'expected a value: "text", a number, true, false or timestamp("...")',
        )


def parse_time(query: str, pos: int, text: str) -> datetime:
    """An ISO-8601 date or time (naive: UTC)."""
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise _fail(query, pos, f"{text!r} is not an ISO-8601 date or time") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def parse_where(query: str) -> Node:
    """The tree of a where clause; InvalidInput naming the position of what is wrong."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidInput("where must be a non-empty filter expression", field="where")
    if len(query) > MAX_LENGTH:
        raise InvalidInput(f"where is longer than {MAX_LENGTH} characters", field="where")
    return _Parser(query).parse()
