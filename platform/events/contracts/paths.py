"""Whether a match or filter names properties a topic's schema declares; pure (no I/O).

A key path is declared when, following `properties` (through `$ref`, `allOf` and the branches
of `anyOf`/`oneOf`), each key is a property of the object schema at that point. An object that
declares no `properties` (a map, or any value) accepts every key below it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["undeclared_paths"]


def undeclared_paths(schema: Mapping[str, Any], match: Mapping[str, Any]) -> list[str]:
    """The JSON pointers of `match`'s key paths that `schema` does not declare."""
    found: list[str] = []
    _walk(schema, [schema], match, "", found)
    return found


def _walk(
    root: Mapping[str, Any],
    nodes: list[Any],
    match: Mapping[str, Any],
    prefix: str,
    found: list[str],
) -> None:
    objects = [n for node in nodes for n in _expand(root, node, 0)]
    for key, value in match.items():
        pointer = f"{prefix}/{str(key).replace('~', '~0').replace('/', '~1')}"
        below: list[Any] = []
        declared = False
        for node in objects:
            props = node.get("properties") if isinstance(node, Mapping) else None
            if not isinstance(props, Mapping):
                declared = True  # no declared properties here: any key
                continue
            if key in props:
                declared = True
                below.append(props[key])
            elif _open_map(node):
                declared = True
        if not declared:
            found.append(pointer)
        elif isinstance(value, Mapping) and below:
            _walk(root, below, value, pointer, found)


def _open_map(node: Mapping[str, Any]) -> bool:
    """Declared properties plus a schema for the others (`dict[str, X]` beside fields)."""
    extra = node.get("additionalProperties")
    return (isinstance(extra, Mapping) and bool(extra)) or bool(node.get("patternProperties"))


def _expand(root: Mapping[str, Any], node: Any, depth: int) -> list[Any]:
    """`node` with `$ref` resolved and unions/allOf flattened into alternatives."""
    if depth > 32 or not isinstance(node, Mapping):
        return [node]
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            key = part.replace("~1", "/").replace("~0", "~")
            target = target.get(key) if isinstance(target, Mapping) else None
        if target is None:
            return [{}]
        return _expand(root, target, depth + 1)
    out: list[Any] = []
    for key in ("anyOf", "oneOf", "allOf"):
        branches = node.get(key)
        if isinstance(branches, list):
            for branch in branches:
                out.extend(_expand(root, branch, depth + 1))
    if "properties" in node or not out:
        out.append(node)
    return [n for n in out if not (isinstance(n, Mapping) and n.get("type") == "null")]
