"""conf/adult.toml as the README runs it on the UCI Adult files, on files in their exact format
written from the embedded people data (the build machines have no UCI copy): the test file is
held out, eval is drawn from the train file, early stopping keeps the best epoch, and the test
split is scored once by the kept model. `make test-all`: the UCI format's parsing runs in
tests/spark/test_prepare.py, and the training path is every dataset's."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tfos_jobs.data import synthetic

from tests.conftest import ROOT

pytestmark = pytest.mark.slow  # a training and a sweep on the adult config, over a minute
BIN = Path(sys.executable).parent
ADULT = ROOT / "conf" / "adult.toml"
PEOPLE = 9000
IN_TEST_FILE = 3000


def write_adult_files(spark, root: Path) -> tuple[Path, Path]:
    """adult.data and adult.test as UCI publishes them: ", " separated, "?" for missing values,
    the test file's first line and its labels ending in "."."""
    synthetic.generate(spark, str(root / "raw"), PEOPLE, 0.0, 5, "2026-01-01")
    people = spark.read.parquet(str(root / "raw" / "people")).orderBy("person_id").toPandas().drop(columns="person_id")
    lines = [", ".join("?" if v is None else str(v) for v in row) for row in people.itertuples(index=False)]
    data, test = root / "adult.data", root / "adult.test"
    data.write_text("\n".join(lines[IN_TEST_FILE:]) + "\n")
    test.write_text("|1x3 Cross validator\n" + "".join(f"{line}.\n" for line in lines[:IN_TEST_FILE]))
    return data, test


def tfos(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(BIN / "tfos"), *args], capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc


@pytest.fixture(scope="module")
def trained(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("adult")
    data, test = write_adult_files(spark, root)
    sets = [f"sources.people.path={data},{test}", f"prepare.output={root / 'dataset'}", f"train.dataset={root / 'dataset'}",
            f"train.model_dir={root / 'model'}", "train.epochs=8", "train.early_stopping_patience=2",
            "train.tensorboard=false", "spark.conf.spark.ui.showConsoleProgress=false"]
    overrides = [a for s in sets for a in ("--set", s)]
    tfos("prepare", "--config", str(ADULT), *overrides)
    proc = tfos("train", "--config", str(ADULT), *overrides)
    return root, proc


def test_the_test_file_is_held_out_and_eval_comes_from_the_train_file(trained):
    root, _ = trained
    manifest = json.loads((root / "dataset" / "_meta" / "manifest.json").read_text())
    records = {name: split["records"] for name, split in manifest["splits"].items()}
    assert records["test"] == IN_TEST_FILE
    assert records["train"] + records["eval"] == PEOPLE - IN_TEST_FILE
    assert 0.10 < records["eval"] / (PEOPLE - IN_TEST_FILE) < 0.20  # eval_fraction 0.15 of the train file
    stats = json.loads((root / "dataset" / "_meta" / "stats.json").read_text())
    assert stats["age"]["count"] == records["train"]  # statistics of the train split only


def test_the_kept_epoch_is_the_best_and_the_test_split_is_scored_by_it(trained):
    import tensorflow as tf

    from tfos_jobs.data import dataset, reader

    root, proc = trained
    m = json.loads((root / "model" / "metrics.json").read_text())
    history = {e["epoch"]: e for e in m["history"]}
    best = min(history, key=lambda e: history[e]["val_loss"])
    assert m["kept_epoch"] == best and m["eval"]["loss"] == pytest.approx(history[best]["val_loss"], abs=1e-6)
    assert "test (held out): loss" in proc.stdout
    assert set(m["test"]) == {"loss", "auc", "accuracy"} and 0.5 < m["test"]["auc"] <= 1.0

    # the exported model, on the test split's records: the figures the chief reported
    meta = dataset.read(str(root / "dataset"))
    serve = tf.saved_model.load(str(root / "model" / "saved_model")).signatures["serving_default"]
    probabilities, labels = [], []
    for features, y in reader.make_dataset(meta.files("test"), meta.spec, 1024):
        probabilities += serve(**{k: features[k] for k in meta.spec.model_inputs})["probability"].numpy().tolist()
        labels += y.numpy().tolist()
    p, y = np.asarray(probabilities), np.asarray(labels)
    assert len(p) == IN_TEST_FILE
    assert m["test"]["accuracy"] == pytest.approx(float(np.mean((p > 0.5) == (y == 1))), abs=1e-6)
    loss = -np.mean(y * np.log(np.clip(p, 1e-7, 1)) + (1 - y) * np.log(np.clip(1 - p, 1e-7, 1)))
    assert m["test"]["loss"] == pytest.approx(loss, abs=1e-4)


def test_a_sweep_ranks_the_kept_epoch_and_leaves_the_test_split_alone(trained, tmp_path):
    from tfos_jobs.contracts.sweep_dir import TrialDir
    from tfos_jobs.progress_log import parse

    root, _ = trained
    # The dataset with its test split's files gone (its manifest still lists them): a sweep that
    # shipped or read the held-out split would fail on them.
    dataset = tmp_path / "dataset"
    shutil.copytree(root / "dataset", dataset)
    held_out = sorted((dataset / "test").iterdir())
    assert held_out
    shutil.rmtree(dataset / "test")
    sweep_dir = tmp_path / "sweep"
    space = tmp_path / "space.toml"
    space.write_text(f"""[sweep]
dir = "{sweep_dir}"
metric = "val_auc"
goal = "maximize"
algorithm = "grid"
max_trials = 1
early_stopping = "none"

[sweep.fixed]
"train.epochs" = 6
"train.early_stopping_patience" = 1

[params."train.model.dropout"]
type = "categorical"
values = [0.0]
""")
    tfos("sweep", "--config", str(ADULT), "--space", str(space), "--set", f"train.dataset={dataset}",
         "--set", "spark.conf.spark.ui.showConsoleProgress=false")
    trial = TrialDir.of(str(sweep_dir), 1)
    result = json.loads(Path(trial.result).read_text())
    lines = {line.epoch: line.metrics for line in parse(Path(trial.progress).read_text())}
    kept = min(lines, key=lambda e: (lines[e]["val_loss"], e))
    assert result["value"] == pytest.approx(lines[kept]["val_auc"])  # the epoch whose model the trial keeps
    assert result["metrics"]["val_loss"] == pytest.approx(lines[kept]["val_loss"])
