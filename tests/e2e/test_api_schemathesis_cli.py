"""The schemathesis CLI, run as a user would, against a real `ripple serve`: every check, every
phase, a fixed seed, and no failure or error.

`tests/e2e/schemathesis.toml` lists the few rules JSON Schema cannot state (a 422 naming the
field is their documented answer) and loads `tests/e2e/schemathesis_hooks.py`, which cuts long
polls to 1 s and keeps times that must lie within the event retention inside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import REPO_ROOT, TOKEN, ApiServer

SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")
CONFIG = REPO_ROOT / "tests" / "e2e" / "schemathesis.toml"


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_schemathesis_cli__every_check_passes(api_server: ApiServer) -> None:
    done = subprocess.run(
        [
            SCHEMATHESIS,
            "--config-file",
            str(CONFIG),
            "run",
            f"{api_server.url}/openapi.json",
            "--checks",
            "all",
            "--max-examples",
            "20",
            "--seed",
            "1",
            "--header",
            f"Authorization: Bearer {TOKEN}",
        ],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=390,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
