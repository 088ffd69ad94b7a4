"""The package's own rules about structure, checked on its source."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("tfos_jobs", "udfs")


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_module_imports_a_private_name_of_another():
    found = []
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                found += [f"{path.relative_to(ROOT)}: from {node.module} import {a.name}"
                          for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert len(sources()) > 50
    assert found == []


def test_run_directory_file_names_are_typed_only_by_their_owner():
    """The files driver and TF nodes exchange are named in contracts/run_dir.py alone."""
    owner = ROOT / "tfos_jobs" / "contracts" / "run_dir.py"
    names = ('"launched"', '"reserved"', '"first_step"', '/heartbeat"', '/done"', '/nodes"', ".error\"", ".lost\"",
             '/progress.jsonl"', '/metrics.json"', '/_run"')
    offenders = [f"{p.relative_to(ROOT)}: {n}" for p in sources() if p != owner for n in names if n in p.read_text()]
    assert all(n in owner.read_text() for n in names)
    assert offenders == []
