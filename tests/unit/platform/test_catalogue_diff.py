"""The catalogue's readable schema diff (pure)."""

from __future__ import annotations

from ripple.platform.ui.catalogue import schema_diff


def test_catalogue_diff__added_removed_and_changed_paths() -> None:
    old = {
        "type": "object",
        "properties": {"userId": {"type": "integer"}, "name": {"type": "string"}},
        "required": ["userId", "name"],
        "additionalProperties": False,
    }
    new = {
        "type": "object",
        "properties": {"userId": {"type": "string"}, "a/b": {"type": "string"}},
        "required": ["userId"],
        "additionalProperties": True,
    }
    assert schema_diff(old, new) == [
        ("~", "/properties/userId/type", '"integer" → "string"'),
        ("-", "/properties/name", '{"type": "string"}'),
        ("+", "/properties/a~1b", '{"type": "string"}'),
        ("-", "/required", '"name"'),
        ("~", "/additionalProperties", "false → true"),
    ]


def test_catalogue_diff__same_schema_has_no_lines_and_reorder_is_a_change() -> None:
    schema = {"enum": ["a", "b"]}
    assert schema_diff(schema, dict(schema)) == []
    assert schema_diff({"enum": ["a", "b"]}, {"enum": ["b", "a"]}) == [
        ("~", "/enum", '["a", "b"] → ["b", "a"]')
    ]
