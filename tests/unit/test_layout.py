"""Guards on the package layout: stdlib `platform` is not shadowed; every module imports; names
say what a thing is, not which issue asked for it."""

from __future__ import annotations

import importlib
import re
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
    "testing": "ripple.testing",
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


_ISSUE_TAG = re.compile(r"issue[ _-]?\d+|#\d+\b", re.IGNORECASE)


def test_layout__no_file_test_or_heading_is_named_after_an_issue_number() -> None:
    # Names say what a thing is or checks; which issue asked for it belongs in commit messages.
    offenders: list[str] = []
    for folder in ("platform", "subscribers", "workflows", "tests", "bench", "docs", "infra"):
        for path in sorted((ROOT / folder).rglob("*")):
            rel = path.relative_to(ROOT)
            if _ISSUE_TAG.search(path.name):
                offenders.append(f"{rel}: file name")
            if path.suffix == ".py":
                offenders += [
                    f"{rel}: {m.group(1)}"
                    for m in re.finditer(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.M)
                    if _ISSUE_TAG.search(m.group(1))
                ]
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        offenders += [
            f"{doc.relative_to(ROOT)}: {line}"
            for line in doc.read_text().splitlines()
            if line.startswith("#") and _ISSUE_TAG.search(line)
        ]
    assert not offenders, "named after an issue number; name the concept instead:\n" + "\n".join(
        offenders
    )
