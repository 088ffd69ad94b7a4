"""A model of the user's own, on a standalone cluster whose workers share neither the driver's disk
nor its environment (`scripts/standalone-cluster start --isolate`, started without PYTHONPATH).

The model module lives in a directory only the driver sees (under /tmp, which every isolated
worker has a private tmpfs over, and on the driver's PYTHONPATH only): the package must ship it.
It trains with 2 TF workers and its own `[train.model.params]`, which metrics.json records, and
the exported model serves through `tfos sql` on that cluster."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CENSUS, ROOT, census_overrides
from tests.hadoop.isolated import IsolatedCluster

pytestmark = pytest.mark.slow  # about 4 minutes: run by `make test-all`

BIN = Path(sys.executable).parent
PEOPLE = 3000


def test_a_driver_only_model_module_trains_and_serves_on_an_isolated_cluster(tmp_path, tmp_path_factory,
                                                                             monkeypatch):
    # the data the executors read (raw tables for SQL, the dataset's files) stays visible to them;
    # the model module and the model directory do not
    data = Path(tmp_path_factory.mktemp("shared-data"))
    raw, dataset, model = data / "raw", data / "dataset", tmp_path / "model"
    modules = tmp_path / "driver-only"
    modules.mkdir()
    shutil.copy(ROOT / "examples" / "mymodels.py", modules / "mymodels.py")
    monkeypatch.delenv("PYTHONPATH", raising=False)  # a clean environment for the cluster's daemons
    monkeypatch.setenv("STANDALONE_ISOLATE_KEEP", str(data))

    local = census_overrides(raw, dataset, people=PEOPLE, master="local[2]") + [
        "synthetic.events_per_person=3", "spark.conf.spark.ui.showConsoleProgress=false"]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "TF_USE_LEGACY_KERAS": "1"}
    for command in ("generate", "prepare"):
        proc = subprocess.run([str(BIN / "tfos"), command, "--config", str(CENSUS),
                               *[a for s in local for a in ("--set", s)]],
                              capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]

    with IsolatedCluster(tmp_path / "cluster", workers=2) as cluster:
        driver_only = {"PYTHONPATH": str(modules)}
        sources = [a for s in local[1:] for a in ("--set", s)]  # the same tables, the cluster's master
        train = cluster.tfos(["train", "--config", CENSUS, *sources,
                              "--set", f"train.dataset={dataset}", "--set", f"train.model_dir={model}",
                              "--set", "train.model.kind=mymodels:build",
                              "--set", "train.model.params.cross_layers=3",
                              "--set", "train.model.params.deep_units=[32, 16]",
                              "--set", "train.workers=2", "--set", "train.epochs=3", "--set", "train.batch_size=64",
                              "--set", "train.learning_rate=0.01", "--set", "train.reservation_timeout=300",
                              "--set", "train.tensorboard=false"], env=driver_only)
        assert f"model code: {modules / 'mymodels.py'} shipped to the executors" in train.stdout
        metrics = json.loads((model / "metrics.json").read_text())
        assert metrics["model"] == {"kind": "mymodels:build", "params": {"cross_layers": 3, "deep_units": [32, 16]}}
        assert [n["role"] for n in metrics["nodes"]] == ["chief", "worker"]
        assert len({n["executor_id"] for n in metrics["nodes"]}) == 2
        assert metrics["eval"]["auc"] > 0.7, metrics["eval"]

        query = ("SELECT count(*) AS n, min(p.probability) AS lo, max(p.probability) AS hi, "
                 "count(DISTINCT p.label) AS labels FROM (SELECT predict_income(struct(*)) AS p FROM features)")
        out = data / "served"  # written by the executors, read here: on the disk both see
        cluster.tfos(["sql", "--config", CENSUS, *sources, "--model", model, "--output", out, "-e", query],
                     env=driver_only)
        import pyarrow.parquet as pq

        row = pq.read_table(out).to_pylist()[0]
        assert row["n"] == PEOPLE - json.loads((dataset / "_meta" / "manifest.json").read_text())["rejected"]["rows"]
        assert 0.0 <= row["lo"] <= row["hi"] <= 1.0 and row["lo"] < row["hi"]
        assert 1 <= row["labels"] <= 2
    assert cluster.processes() == []
