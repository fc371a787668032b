"""Step bodies of the verify apps: each call appends its name to the file named by
RIPPLE_TEST_SIDE_EFFECTS, so a test sees whether any body ran (in any process)."""

from __future__ import annotations

import os


def effect(name: str) -> str:
    path = os.environ.get("RIPPLE_TEST_SIDE_EFFECTS")
    if path:
        with open(path, "a") as f:
            f.write(name + "\n")
    return name


def reserve() -> str:
    return effect("reserve")


def charge() -> str:
    return effect("charge")


def fraud_check() -> str:
    return effect("fraud-check")
