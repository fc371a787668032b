"""`ripple` starts fast: importing the CLI (all `--help` needs) loads no heavy library."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("fastapi", "asyncpg", "aiohttp", "pydantic", "redis", "uvicorn", "structlog", "rich")


def test_cli_imports__the_cli_module_imports_no_heavy_library() -> None:
    code = (
        "import json, sys\n"
        "import ripple.platform.cli\n"
        f"print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_cli_imports__help_loads_no_heavy_library_either() -> None:
    code = (
        "import json, sys\n"
        "from ripple.platform.cli import app\n"
        "try:\n"
        "    app(['--help'], standalone_mode=False)\n"
        "finally:\n"
        f"    print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == []
