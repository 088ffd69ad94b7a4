"""examples/python_api.py, the page docs/python_api.md shows, run as a user runs it: with the
venv's interpreter from a shell where nothing is activated and nothing of the package is set."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "python_api.py"
PAGE = ROOT / "docs" / "python_api.md"
SCRUBBED = ("VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "TF_USE_LEGACY_KERAS", "PYTHONPATH",
            "TF_CPP_MIN_LOG_LEVEL", "PYARROW_IGNORE_TIMEZONE")


def scrubbed_env() -> dict[str, str]:
    venv_bin = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED and not k.startswith("SPARK_")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != venv_bin)
    return env


def test_the_page_shows_the_example_file_as_it_is():
    page = PAGE.read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert EXAMPLE.read_text() in blocks


@pytest.mark.slow  # about 80 s on 2 idle cores, 150 s beside other work
def test_the_example_runs_with_the_venvs_python_and_nothing_activated(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(EXAMPLE), str(out)], cwd=tmp_path, env=scrubbed_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    train, evaluation = map(int, re.search(r"prepared: train (\d+) eval (\d+) records", text).groups())
    assert train + evaluation == 4000 and 0.1 < evaluation / 4000 < 0.3
    nodes, epochs, auc = re.search(r"trained: (\d+) nodes, (\d+) epochs, eval auc ([\d.]+)", text).groups()
    assert (int(nodes), int(epochs)) == (2, 4) and float(auc) > 0.75
    levels = int(re.search(r"sql: (\d+) education levels scored with predict_income\(\)", text).group(1))
    assert levels == 16
    probabilities = [float(p) for p in re.findall(r"mean probability ([\d.]+)", text)]
    assert len(probabilities) == 3 and all(0 < p < 1 for p in probabilities)
    assert probabilities == sorted(probabilities, reverse=True)
    assert (out / "model" / "saved_model" / "saved_model.pb").is_file()
