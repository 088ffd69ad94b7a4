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


def test_model_directory_file_names_are_typed_only_by_their_owner():
    """The files of a model directory are named in contracts/model_dir.py alone."""
    owner = ROOT / "tfos_jobs" / "contracts" / "model_dir.py"
    names = ('/progress.jsonl"', '/metrics.json"', '/_run"', '/backup"', '/sample_predictions.json"')
    offenders = [f"{p.relative_to(ROOT)}: {n}" for p in sources() if p != owner for n in names if n in p.read_text()]
    assert all(n in owner.read_text() for n in names)
    assert offenders == []


def test_nothing_on_the_driver_or_a_node_shares_a_file_with_the_other():
    """A cluster shares no disk: the control channel carries everything between driver and nodes,
    so no module opens a model, run or dataset path with Python's file calls or TensorFlow's gfile
    except the storage layer (driver) and the node's own workspace."""
    allowed = {"tfos_jobs/storage.py", "tfos_jobs/contracts/workspace.py", "tfos_jobs/jobs/train/executor/inputs.py"}
    found = []
    for path in sources():
        rel = str(path.relative_to(ROOT))
        if rel in allowed:
            continue
        text = path.read_text()
        found += [f"{rel}: {call}" for call in ("tf.io.gfile", "gfile.GFile", "glob.glob(") if call in text]
    assert found == []
