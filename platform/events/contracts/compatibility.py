"""Schema compatibility: can a reader's JSON Schema read every event a writer's schema allows?

Pure (no I/O). `reader_accepts(reader, writer)` judges the keywords pydantic emits (type,
properties, required, additionalProperties, items, enum/const, anyOf/oneOf, $ref/$defs, format,
numeric, length and size bounds); annotations (title, description, default, examples, ...) never
matter; any other keyword that differs is a problem, since it is not judged. `judge` applies a
topic's mode (Confluent's meanings) to a new schema and the versions before it.

Open content models (no `additionalProperties: false`, pydantic's default): a writer that is
open may have written any value under a property it does not declare. When the writer is a
past version, a property the reader adds is a *pending* problem (`Verdict.unseen`): the
registry accepts it only if no stored event of the topic carries that path. When the writer is
the new schema (forward), nobody can know what it will write, so it is a problem.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ripple.platform.events.contracts.records import Compatibility

__all__ = ["Verdict", "judge", "reader_accepts"]

Schema = Mapping[str, Any] | bool

#: Keywords that only describe: a change in them never breaks a reader.
ANNOTATIONS: Final = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$comment",
        "$schema",
        "$id",
        "$defs",
        "definitions",
        "discriminator",
        "contentMediaType",
        "contentEncoding",
    }
)
#: Keywords this module judges (the rest are compared for equality).
JUDGED: Final = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "enum",
        "const",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "uniqueItems",
        "pattern",
    }
)
_TYPES: Final = ("null", "boolean", "object", "array", "number", "integer", "string")
_MISSING: Final = object()


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of a judgement."""

    #: Breaking changes, each "<JSON pointer>: <what>".
    problems: list[str] = field(default_factory=list)
    #: Instance paths (keys from the root) a reader declares that an open past writer did not:
    #: compatible only if no stored event carries them.
    unseen: list[tuple[str, ...]] = field(default_factory=list)


def judge(
    mode: Compatibility,
    new: Mapping[str, Any],
    previous: Sequence[tuple[int, Mapping[str, Any]]],
) -> Verdict:
    """Judge `new` against the topic's `previous` (version, schema) pairs, oldest first, under
    `mode`: backward (the new schema reads events of the last version), forward (the last
    version reads events of the new one), full (both); `_transitive` forms check every
    previous version; none checks nothing."""
    if mode == "none" or not previous:
        return Verdict()
    against = previous if mode.endswith("_transitive") else previous[-1:]
    base = mode.removesuffix("_transitive")
    problems: list[str] = []
    unseen: list[tuple[str, ...]] = []
    for version, old in reversed(against):
        if base in ("backward", "full"):
            found = reader_accepts(
                new, old, reader_name="the new schema", writer_name=f"version {version}"
            )
            problems.extend(found.problems)
            unseen.extend(p for p in found.unseen if p not in unseen)
        if base in ("forward", "full"):
            found = reader_accepts(
                old,
                new,
                reader_name=f"version {version}",
                writer_name="the new schema",
                writer_past=False,
            )
            problems.extend(found.problems)
    return Verdict(_unique(problems), unseen)


def reader_accepts(
    reader: Mapping[str, Any],
    writer: Mapping[str, Any],
    *,
    reader_name: str = "the reader",
    writer_name: str = "the writer",
    writer_past: bool = True,
) -> Verdict:
    """Whether every instance `writer` allows is valid under `reader`; the problems if not.

    `writer_past`: the writer is a registered version (its events exist and can be looked
    at), so properties an open writer never declared are reported in `Verdict.unseen`."""
    check = _Check(reader, writer, reader_name, writer_name, writer_past)
    check.subset(reader, writer, ())
    return Verdict(_unique(check.problems), check.unseen)


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _pointer(path: tuple[str, ...]) -> str:
    if not path:
        return "/"
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in path)


class _Check:
    """One reader/writer comparison: the two roots (for `$ref`) and what it found."""

    def __init__(
        self,
        reader: Mapping[str, Any],
        writer: Mapping[str, Any],
        reader_name: str,
        writer_name: str,
        writer_past: bool,
    ) -> None:
        self.roots = (reader, writer)
        self.r_name = reader_name
        self.w_name = writer_name
        self.writer_past = writer_past
        self.problems: list[str] = []
        self.unseen: list[tuple[str, ...]] = []
        #: ($ref of reader, $ref of writer) pairs under comparison: recursive models end.
        self._seen_refs: set[tuple[str, str]] = set()

    def problem(self, path: tuple[str, ...], text: str) -> None:
        self.problems.append(f"{_pointer(path)}: {text}")

    # -- schema normalisation ----------------------------------------------------------------

    def resolve(self, schema: Any, side: int) -> tuple[Any, str]:
        """`schema` with `$ref` (to `#/$defs/...` of its root) and single `allOf` merged in."""
        refs: list[str] = []
        for _ in range(32):
            if not isinstance(schema, Mapping):
                return schema, "|".join(refs)
            if "$ref" in schema:
                ref = str(schema["$ref"])
                refs.append(ref)
                target = _lookup(self.roots[side], ref)
                if target is _MISSING:
                    return {"$ref": ref, "x-unresolved": True}, "|".join(refs)
                rest = {k: v for k, v in schema.items() if k != "$ref"}
                schema = _merge(target, rest)
                continue
            all_of = schema.get("allOf")
            if isinstance(all_of, list) and len(all_of) == 1:
                rest = {k: v for k, v in schema.items() if k != "allOf"}
                schema = _merge(all_of[0], rest)
                continue
            return schema, "|".join(refs)
        return schema, "|".join(refs)

    # -- the subset relation -----------------------------------------------------------------

    def subset(self, reader: Any, writer: Any, path: tuple[str, ...]) -> None:
        """Report why some instance valid under `writer` is invalid under `reader`."""
        reader, r_ref = self.resolve(reader, 0)
        writer, w_ref = self.resolve(writer, 1)
        if r_ref and w_ref:
            if (r_ref, w_ref) in self._seen_refs:
                return
            self._seen_refs.add((r_ref, w_ref))
        if writer is False or reader is True or reader == {}:
            return
        if reader is False:
            self.problem(path, f"{self.r_name} accepts nothing here; {self.w_name} wrote values")
            return
        if writer is True:
            writer = {}
        if not isinstance(reader, Mapping) or not isinstance(writer, Mapping):
            self.problem(path, "schema is neither an object nor a boolean")
            return
        if "x-unresolved" in reader or "x-unresolved" in writer:
            self.problem(path, "a $ref does not resolve inside the schema; it cannot be judged")
            return
        w_branches = _branches(writer)
        if w_branches is not None:
            for branch in w_branches:
                self.subset(reader, _merge(branch, _without_union(writer)), path)
            return
        r_branches = _branches(reader)
        if r_branches is not None:
            self.subset_of_union(reader, r_branches, writer, path)
            return
        self.subset_plain(reader, writer, path)

    def subset_of_union(
        self, reader: Mapping[str, Any], branches: list[Any], writer: Any, path: tuple[str, ...]
    ) -> None:
        """`writer` (no union) must fit one branch of the reader's union."""
        rest = _without_union(reader)
        best: _Check | None = None
        for branch in branches:
            trial = _Check(self.roots[0], self.roots[1], self.r_name, self.w_name, self.writer_past)
            trial._seen_refs = set(self._seen_refs)
            trial.subset(_merge(branch, rest), writer, path)
            if not trial.problems:
                self.unseen.extend(trial.unseen)
                return
            if best is None or len(trial.problems) < len(best.problems):
                best = trial
        w_types = _types(writer)
        if w_types is not None and best is not None and not _fits_any_type(branches, w_types):
            self.problem(
                path,
                f"{self.r_name} reads {_describe(reader)}, but {self.w_name} wrote "
                f"{_describe(writer)}",
            )
            return
        if best is not None:
            self.problems.extend(best.problems)
            self.unseen.extend(best.unseen)

    def subset_plain(
        self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: tuple[str, ...]
    ) -> None:
        r_types, w_types = _types(reader), _types(writer)
        if r_types is not None:
            if w_types is None:
                w_types = _values_types(writer)
            missing = None if w_types is None else sorted(w_types - _widen(r_types))
            if w_types is None:
                self.problem(
                    path,
                    f"{self.r_name} reads only {_describe(reader)}; {self.w_name} allowed any type",
                )
                return
            if missing:
                self.problem(
                    path,
                    f"{self.r_name} reads {_describe(reader)}, but {self.w_name} wrote "
                    f"{' or '.join(missing)}",
                )
                return
        self.values(reader, writer, path)
        self.bounds(reader, writer, path)
        self.objects(reader, writer, path)
        if "items" in reader or "items" in writer:
            self.subset(reader.get("items", True), writer.get("items", True), (*path, "*"))
        for key in sorted((set(reader) | set(writer)) - JUDGED - ANNOTATIONS):
            if reader.get(key, _MISSING) != writer.get(key, _MISSING):
                self.problem(
                    path,
                    f"keyword {key!r} changed; Ripple does not judge it, so any change counts "
                    "as breaking (compatibility 'none' accepts it)",
                )

    def values(
        self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: tuple[str, ...]
    ) -> None:
        """enum / const: the reader must accept every value the writer may write."""
        r_values = _allowed_values(reader)
        if r_values is None:
            return
        w_values = _allowed_values(writer)
        if w_values is None:
            self.problem(
                path,
                f"{self.r_name} accepts only {_show(r_values)}; {self.w_name} allowed any value",
            )
            return
        lost = [v for v in w_values if not any(_same(v, r) for r in r_values)]
        if lost:
            self.problem(
                path, f"{self.r_name} does not accept {_show(lost)}, which {self.w_name} allowed"
            )

    def bounds(
        self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: tuple[str, ...]
    ) -> None:
        r_format, w_format = reader.get("format"), writer.get("format")
        if r_format is not None and r_format != w_format:
            self.problem(
                path,
                f"{self.r_name} requires format {r_format!r}; {self.w_name} "
                + (f"wrote format {w_format!r}" if w_format else "required no format"),
            )
        r_pattern = reader.get("pattern")
        if r_pattern is not None and r_pattern != writer.get("pattern"):
            self.problem(path, f"{self.r_name} requires pattern {r_pattern!r}, which is new")
        for low, high in (
            ("minLength", "maxLength"),
            ("minItems", "maxItems"),
            ("minProperties", "maxProperties"),
        ):
            r_low, w_low = reader.get(low), writer.get(low)
            if r_low is not None and r_low > (w_low or 0):
                self.problem(path, f"{low} rose to {r_low} from {w_low or 0}")
            r_high, w_high = reader.get(high), writer.get(high)
            if r_high is not None and (w_high is None or r_high < w_high):
                self.problem(path, f"{high} fell to {r_high} from {_show_bound(w_high)}")
        if reader.get("uniqueItems") and not writer.get("uniqueItems"):
            self.problem(path, f"{self.r_name} requires unique items; {self.w_name} did not")
        r_multiple = reader.get("multipleOf")
        if r_multiple is not None:
            w_multiple = writer.get("multipleOf")
            if w_multiple is None or not _divides(r_multiple, w_multiple):
                self.problem(path, f"multipleOf {r_multiple} is stricter than before")
        r_min, w_min = _lower(reader), _lower(writer)
        if r_min is not None and (w_min is None or _tighter_low(r_min, w_min)):
            self.problem(path, f"lower bound rose to {_show_low(r_min)} from {_show_low(w_min)}")
        r_max, w_max = _upper(reader), _upper(writer)
        if r_max is not None and (w_max is None or _tighter_high(r_max, w_max)):
            self.problem(path, f"upper bound fell to {_show_high(r_max)} from {_show_high(w_max)}")

    def objects(
        self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: tuple[str, ...]
    ) -> None:
        keywords = ("properties", "required", "additionalProperties")
        if not any(k in reader for k in keywords):
            return  # the reader constrains no object shape
        r_props: Mapping[str, Any] = reader.get("properties") or {}
        w_props: Mapping[str, Any] = writer.get("properties") or {}
        r_extra = reader.get("additionalProperties", True)
        w_extra = writer.get("additionalProperties", True)
        w_required = set(writer.get("required") or ())
        for name in reader.get("required") or ():
            if name not in w_required:
                self.problem(
                    (*path, name),
                    f"{self.r_name} requires this property; {self.w_name} did not "
                    + ("require it" if name in w_props else "have it"),
                )
        for name, r_schema in r_props.items():
            self.declared(name, r_schema, w_props, w_extra, path)
        for name, w_schema in w_props.items():
            if name in r_props:
                continue
            here = (*path, name)
            if r_extra is False:
                self.problem(
                    here,
                    f"{self.r_name} is closed (additionalProperties: false) and lacks this "
                    f"property, which {self.w_name} wrote",
                )
            elif r_extra is not True and r_extra != {}:
                self.subset(r_extra, w_schema, here)
        if r_extra is False and w_extra is not False:
            self.problem(
                path,
                f"{self.r_name} closed additionalProperties; "
                f"{self.w_name} allowed other properties",
            )
        elif r_extra not in (True, False) and r_extra != {} and w_extra is not False:
            self.subset(r_extra, w_extra, (*path, "*"))

    def declared(
        self,
        name: str,
        r_schema: Any,
        w_props: Mapping[str, Any],
        w_extra: Any,
        path: tuple[str, ...],
    ) -> None:
        """A property the reader declares: what the writer may have put there."""
        here = (*path, name)
        if name in w_props:
            self.subset(r_schema, w_props[name], here)
        elif w_extra is False:
            return  # the writer never wrote it
        elif w_extra is True or w_extra == {}:
            if self.writer_past and "*" not in here:
                self.unseen.append(here)
            else:
                self.problem(
                    here,
                    f"{self.w_name} is an open model (no additionalProperties: false), so it "
                    f"may write this property with any value, which {self.r_name} declares; "
                    "close the model (pydantic: extra='forbid') or use compatibility 'none'",
                )
        else:
            self.subset(r_schema, w_extra, here)


# -- helpers on one schema ---------------------------------------------------------------------


def _lookup(root: Mapping[str, Any], ref: str) -> Any:
    if not ref.startswith("#"):
        return _MISSING
    node: Any = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        key = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or key not in node:
            return _MISSING
        node = node[key]
    return node


def _merge(base: Any, extra: Mapping[str, Any]) -> Any:
    meaningful = {k: v for k, v in extra.items() if k not in ANNOTATIONS}
    if not meaningful:
        return base
    if base is True:
        return dict(meaningful)
    if not isinstance(base, Mapping):
        return base
    return {**base, **meaningful}


def _branches(schema: Mapping[str, Any]) -> list[Any] | None:
    for key in ("anyOf", "oneOf"):
        value = schema.get(key)
        if isinstance(value, list) and value:
            return value
    return None


def _without_union(schema: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k not in ("anyOf", "oneOf", "discriminator")}


def _types(schema: Any) -> set[str] | None:
    if not isinstance(schema, Mapping):
        return None
    value = schema.get("type")
    if value is None:
        return None
    return {value} if isinstance(value, str) else {str(t) for t in value}


def _widen(types: set[str]) -> set[str]:
    return types | {"integer"} if "number" in types else types


def _values_types(schema: Mapping[str, Any]) -> set[str] | None:
    """The JSON types of an enum/const-only writer (which has no `type`)."""
    values = _allowed_values(schema)
    if values is None:
        return None
    return {_json_type(v) for v in values}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _fits_any_type(branches: list[Any], w_types: set[str]) -> bool:
    accepted: set[str] = set()
    for branch in branches:
        types = _types(branch)
        if types is None:
            return True
        accepted |= _widen(types)
    return w_types <= accepted


def _allowed_values(schema: Mapping[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    enum = schema.get("enum")
    return list(enum) if isinstance(enum, list) else None


def _same(a: Any, b: Any) -> bool:
    return bool(json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True))


def _show(values: list[Any]) -> str:
    return ", ".join(json.dumps(v) for v in values)


def _describe(schema: Mapping[str, Any]) -> str:
    branches = _branches(schema)
    if branches is not None:
        names = [_describe(b) if isinstance(b, Mapping) else str(b) for b in branches]
        return " or ".join(names)
    types = _types(schema)
    if types is not None:
        return " or ".join(t for t in _TYPES if t in types)
    return "any type"


def _show_bound(value: Any) -> str:
    return "no limit" if value is None else str(value)


#: A bound: (value, exclusive).
_Bound = tuple[float, bool]


def _lower(schema: Mapping[str, Any]) -> _Bound | None:
    found: list[_Bound] = []
    if isinstance(schema.get("minimum"), int | float):
        found.append((float(schema["minimum"]), False))
    if isinstance(schema.get("exclusiveMinimum"), int | float):
        found.append((float(schema["exclusiveMinimum"]), True))
    return max(found, key=lambda b: (b[0], b[1])) if found else None


def _upper(schema: Mapping[str, Any]) -> _Bound | None:
    found: list[_Bound] = []
    if isinstance(schema.get("maximum"), int | float):
        found.append((float(schema["maximum"]), False))
    if isinstance(schema.get("exclusiveMaximum"), int | float):
        found.append((float(schema["exclusiveMaximum"]), True))
    return min(found, key=lambda b: (b[0], not b[1])) if found else None


def _tighter_low(reader: _Bound, writer: _Bound) -> bool:
    return reader[0] > writer[0] or (reader[0] == writer[0] and reader[1] and not writer[1])


def _tighter_high(reader: _Bound, writer: _Bound) -> bool:
    return reader[0] < writer[0] or (reader[0] == writer[0] and reader[1] and not writer[1])


def _show_low(bound: _Bound | None) -> str:
    if bound is None:
        return "no limit"
    return f"{'>' if bound[1] else '>='} {bound[0]:g}"


def _show_high(bound: _Bound | None) -> str:
    if bound is None:
        return "no limit"
    return f"{'<' if bound[1] else '<='} {bound[0]:g}"


def _divides(reader: Any, writer: Any) -> bool:
    """Every multiple of `writer` is a multiple of `reader`."""
    try:
        ratio = float(writer) / float(reader)
    except (TypeError, ValueError, ZeroDivisionError):
        return False
    return math.isclose(ratio, round(ratio)) and round(ratio) != 0
