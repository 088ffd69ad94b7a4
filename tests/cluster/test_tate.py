"""`make demo-tate` on the whole Tate table (data/tate/): prepare, train, predict and tfos baseline as
the Makefile runs them, into a temporary directory. The model must beat the bag-of-words baseline
on the held-out test rows, and both the majority class; the figures the docs quote come from this
run. `make test-all`: the baseline's own behaviour is tested on a tiny table (tests/spark/)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # a training on 18,466 rows and three logistic regressions: minutes
BIN = Path(sys.executable).parent
TATE = ROOT / "conf" / "tate.toml"
ROW = re.compile(r"^\s+(majority class|CountVectorizer|the model).*?\s([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", re.M)


def tfos(*args: str) -> str:
    proc = subprocess.run([str(BIN / "tfos"), *args], capture_output=True, text=True, timeout=1800, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout


def test_the_model_beats_the_bag_of_words_baseline_on_test(tmp_path):
    sets = [f"prepare.output={tmp_path / 'dataset'}", f"train.dataset={tmp_path / 'dataset'}",
            f"train.model_dir={tmp_path / 'model'}", f"predict.model={tmp_path / 'model'}",
            f"predict.output={tmp_path / 'predictions'}", "train.tensorboard=false",
            "spark.conf.spark.ui.showConsoleProgress=false"]
    overrides = [a for s in sets for a in ("--set", s)]
    for command in ("prepare", "train", "predict"):
        tfos(command, "--config", str(TATE), *overrides)
    rows = {m[1]: [float(x) for x in m.groups()[1:]] for m in ROW.finditer(tfos("baseline", "--config", str(TATE), *overrides))}
    assert set(rows) == {"majority class", "CountVectorizer", "the model"}
    model, bag, majority = rows["the model"], rows["CountVectorizer"], rows["majority class"]
    test_accuracy, test_f1 = 2, 3
    assert model[test_accuracy] > bag[test_accuracy] > majority[test_accuracy] + 0.3
    assert model[test_f1] > bag[test_f1]
