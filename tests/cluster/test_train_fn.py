"""A training function of the user's (`train.fn`) on a real local-cluster: Keras's fit with the package's callbacks and
a custom loop with tf.GradientTape, each on two multi_worker_mirrored workers, exported and served; one that raises
fails the run with its own error and is not relaunched; one that never exports fails saying so."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from pyspark.sql import functions as F

from tests.cluster.test_training import assert_exported_model_matches_trained, assert_no_node_process_left, metrics, \
    train
from tests.conftest import ROOT, prepared_dataset
from tfos_jobs.cluster.node.train_context import NOT_EXPORTED
from udfs import register

PEOPLE = 12_000
EXAMPLES = {"PYTHONPATH": str(ROOT / "examples")}
TWO_WORKERS = "spark.master=local-cluster[2,1,1536]"


@pytest.fixture(scope="module")
def dataset(spark, tmp_path_factory):
    return prepared_dataset(spark, tmp_path_factory.mktemp("train-fn"), PEOPLE, 5.0, 7)


PARAMETER_SERVER = ("spark.master=local-cluster[3,1,1536]", "train.strategy=parameter_server", "train.workers=1",
                    "train.ps=1")


@pytest.mark.slow  # 70 to 90 s each: `make test-all`; `make test` runs a training function in the never-exports case
@pytest.mark.parametrize("fn, settings, roles", [
    ("fit", (TWO_WORKERS,), ["chief", "worker"]),
    ("loop", (TWO_WORKERS,), ["chief", "worker"]),
    ("fit", PARAMETER_SERVER, ["chief", "ps", "worker"]),
], ids=["fit", "loop", "fit-parameter-server"])
def test_a_training_function_trains_on_a_cluster_and_exports_a_model_sql_serves(spark, dataset, tmp_path, fn, settings,
                                                                                roles):
    model_dir = tmp_path / "model"
    proc, _ = train(dataset, model_dir, *settings, f"train.fn=mytraining:{fn}", "train.checkpoint_steps=20",
                    env=EXAMPLES)
    assert f"with the training function mytraining:{fn}" in proc.stdout
    m = metrics(model_dir)
    assert sorted(n["role"] for n in m["nodes"]) == roles and m["attempts"] == 1
    assert m["model"]["kind"] == f"mytraining:{fn}"
    assert [e["epoch"] for e in m["history"]] == [1, 2, 3]  # an epoch line per epoch, from fit's callbacks or the loop
    assert len(re.findall(r"epoch   \d/3 \[#+\.*\] loss \S+", proc.stdout)) == 3, proc.stdout[-2000:]
    assert m["eval"]["auc"] > 0.8, m["eval"]
    assert_exported_model_matches_trained(model_dir)  # over the spec's columns: exported as the package's own
    assert_serves_in_sql(spark, model_dir)
    assert_no_node_process_left(m)


def assert_serves_in_sql(spark, model_dir) -> None:
    """The exported model registered by name scores the sample rows as the trained model did."""
    sample = json.loads((model_dir / "sample_predictions.json").read_text())
    names = sorted(sample["rows"])
    rows = spark.createDataFrame(list(zip(*(sample["rows"][n] for n in names))), names)
    register(spark, "trained_by_fn", str(model_dir))
    got = [r.p.probability for r in rows.select(F.expr("trained_by_fn(struct(*)) AS p")).collect()]
    np.testing.assert_allclose(got, np.asarray(sample["outputs"]).reshape(-1), atol=1e-5)


@pytest.mark.slow  # about 40 s: `make test-all`; the next one fails a run in `make test`
def test_a_training_function_that_raises_fails_the_run_with_its_error_once(dataset, tmp_path):
    model_dir = tmp_path / "model"
    proc, _ = train(dataset, model_dir, TWO_WORKERS, "train.fn=tests.cluster.boom:train_raises", expect=2,
                    env={"PYTHONPATH": str(ROOT)})
    assert re.search(r"TF node (chief|worker)-0 failed: ValueError: boom: this training function always fails",
                     proc.stderr), proc.stderr[-3000:]
    assert "relaunching" not in proc.stdout + proc.stderr  # a code error: not relaunched
    assert not (model_dir / "saved_model").exists()


def test_a_training_function_that_never_exports_fails_saying_so(dataset, tmp_path):
    model_dir = tmp_path / "model"
    proc, _ = train(dataset, model_dir, "train.strategy=local", "train.fn=tests.cluster.boom:train_forgets_export",
                    expect=2, env={"PYTHONPATH": str(ROOT)})
    assert NOT_EXPORTED in proc.stderr, proc.stderr[-3000:]
    assert not (model_dir / "saved_model").exists()


@pytest.mark.slow  # about 60 s: `make test-all`
def test_tensorflowonspark_keras_example_with_its_two_edits_trains_on_two_workers(tmp_path):
    """examples/tfos_mnist_keras.py: TFoS's own `main_fun(args, ctx)`, its data and its export edited, run as a user
    runs it; the SavedModel it exported answers with a distribution over the ten digits."""
    import tensorflow as tf

    export = tmp_path / "export"
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "tfos_mnist_keras.py"), "--work",
                           str(tmp_path / "work"), "--export_dir", str(export), "--epochs", "2",
                           "--steps_per_epoch", "30"], cwd=tmp_path, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "trained: 2 epochs on 2 nodes" in proc.stdout, proc.stdout[-2000:]
    m = metrics(export)
    assert [n["role"] for n in m["nodes"]] == ["chief", "worker"] and m["model"]["kind"] == "__main__:main_fun"
    assert {"loss", "accuracy"} <= set(m["final"])
    serve = tf.saved_model.load(str(export / "saved_model")).signatures["serving_default"]
    [name] = serve.structured_input_signature[1]
    [probabilities] = serve(**{name: tf.zeros((3, 28, 28, 1))}).values()
    assert probabilities.shape == (3, 10)
    np.testing.assert_allclose(probabilities.numpy().sum(axis=1), 1.0, atol=1e-5)
