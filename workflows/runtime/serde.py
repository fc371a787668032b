"""`ripple.workflows.serde` under the name the replay engine still imports it by (the shared
module left runtime/ so that runs/ and authoring/ need nothing from here)."""

from ripple.workflows.serde import (
    NO_TYPE,
    STORED_ERROR,
    dump,
    error_json,
    load,
    rebuild_error,
    return_annotation,
    validate,
)

__all__ = [
    "NO_TYPE",
    "STORED_ERROR",
    "dump",
    "error_json",
    "load",
    "rebuild_error",
    "return_annotation",
    "validate",
]
