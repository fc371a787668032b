"""`ripple` starts fast: importing the CLI (all `--help` needs) loads no heavy library, and a
group's command loads the modules of that group only."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

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


def _tree(modules: list[str] | None) -> Any:
    """In a fresh interpreter, the command tree (names, parameters, help) that `ripple` builds
    with the command modules `modules` loaded (None: all), as JSON."""
    code = (
        "import json, sys\n"
        "import typer.main\n"
        "from ripple.platform import cli\n"
        f"modules = {modules!r}\n"
        "root = cli.app if modules is None else cli.load_commands(modules)\n"
        "def tree(command):\n"
        "    subs = getattr(command, 'commands', {})\n"
        "    return {'help': command.help, 'params': [p.name for p in command.params],\n"
        "            'commands': {n: tree(c) for n, c in subs.items()}}\n"
        "print(json.dumps(tree(typer.main.get_command(root))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_cli_imports__each_group_is_whole_with_only_its_own_modules() -> None:
    from ripple.platform.cli import COMMAND_MODULES, GROUP_MODULES

    full = _tree(None)
    assert set(GROUP_MODULES) == {name for name, sub in full["commands"].items() if sub["commands"]}
    for group, modules in GROUP_MODULES.items():
        assert list(modules) == [m for m in COMMAND_MODULES if m in modules], group
        assert _tree(list(modules))["commands"][group] == full["commands"][group], group


def test_cli_imports__a_group_command_loads_no_other_group() -> None:
    code = (
        "import json, sys\n"
        "sys.argv = ['ripple', 'queues', '--help']\n"
        "from ripple.platform.cli import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "cli = [m for m in sys.modules if m.startswith('ripple.platform.cli.')]\n"
        "print(json.dumps(sorted(cli)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == [
        "ripple.platform.cli.groups",
        "ripple.platform.cli.operate",
        "ripple.platform.cli.options",
        "ripple.platform.cli.output",
        "ripple.platform.cli.queues",
    ]
