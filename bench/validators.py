"""JSON Schema validators side by side: jsonschema, fastjsonschema and jsonschema-rs.

python -m bench.validators

Each library compiles a pydantic-shaped schema once and validates the same valid payload (the
hot path of a publish to a typed topic), then an invalid one (where the error messages are
built). Prints validations per second; Ripple uses the fastest that names each violation's
JSON pointer (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import fastjsonschema
import jsonschema
import jsonschema_rs

from bench.publish import TYPED_SCHEMA

VALID: dict[str, Any] = {"n": 7, "user": {"id": 7, "plan": "pro"}}
INVALID: dict[str, Any] = {"n": "x", "user": {"id": 7, "plan": "gold"}}
#: Wall-clock seconds per measurement.
BUDGET = 1.0


def rate(check: Callable[[], object]) -> float:
    """Calls per second of `check`, best of three rounds of about BUDGET / 3 seconds."""
    best = 0.0
    for _ in range(3):
        calls = 0
        started = time.perf_counter()
        while (elapsed := time.perf_counter() - started) < BUDGET / 3:
            for _ in range(200):
                check()
            calls += 200
        best = max(best, calls / elapsed)
    return best


def main() -> None:
    plain = jsonschema.Draft202012Validator(TYPED_SCHEMA)
    fast = fastjsonschema.compile(TYPED_SCHEMA)
    rust = jsonschema_rs.Draft202012Validator(TYPED_SCHEMA, validate_formats=True)

    def fast_invalid() -> None:
        with contextlib.suppress(fastjsonschema.JsonSchemaValueException):
            fast(INVALID)

    rows = [
        ("jsonschema", lambda: plain.is_valid(VALID), lambda: list(plain.iter_errors(INVALID))),
        ("fastjsonschema", lambda: fast(VALID), fast_invalid),
        ("jsonschema-rs", lambda: rust.is_valid(VALID), lambda: list(rust.iter_errors(INVALID))),
    ]
    print(f"{'validator':<16} {'valid payload':>16} {'invalid (errors)':>18}")
    for name, valid, invalid in rows:
        print(f"{name:<16} {rate(valid):>12,.0f} /s {rate(invalid):>14,.0f} /s", flush=True)
    print("fastjsonschema stops at the first violation; the others report every one.")


if __name__ == "__main__":
    main()
