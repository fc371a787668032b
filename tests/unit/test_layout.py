"""Guards on the package layout: stdlib `platform` is not shadowed; every module imports."""

from __future__ import annotations

import importlib
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = {
    "platform": "ripple.platform",
    "subscribers": "ripple.subscribers",
    "workflows": "ripple.workflows",
}


def test_layout__import_platform_from_repo_root_is_stdlib() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import platform; print(platform.__file__, platform.system())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "site-packages" not in out
    assert str(ROOT / "platform") not in out
    assert not (ROOT / "platform" / "__init__.py").exists()


def _modules() -> list[str]:
    names = []
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            names.append(".".join([package, *parts]))
    return names


@pytest.mark.parametrize("module", _modules())
def test_layout__every_module_imports_as_ripple(module: str) -> None:
    importlib.import_module(module)


def test_layout__installed_migrations_match_source() -> None:
    shipped = {e.name for e in resources.files("ripple.sql").iterdir() if e.name.endswith(".sql")}
    source = {p.name for p in (ROOT / "infra" / "sql").glob("*.sql")}
    assert shipped == source, "infra/sql changed since install: run `make setup`"
