"""Runs, sweeps and models in a live MLflow tracking server (tests/tracking/server.py), checked
through MlflowClient; registered models served by alias from SQL as from their directory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.testing import assertDataFrameEqual

from tfos_jobs import config
from tfos_jobs.contracts.serving import task_of, udf_return_type
from tfos_jobs.jobs.serve import sql
from tfos_jobs.jobs.train.driver import tracked
from udfs.model_location import served_spec

from tests.conftest import CENSUS, ROOT, census_overrides, prepared_dataset
from tests.hadoop.support import free_port

BIN = Path(sys.executable).parent
PEOPLE = 3000
FAST = ["train.strategy=local", "train.epochs=3", "train.steps_per_epoch=30", "train.batch_size=128"]
SWEEP = """[sweep]
algorithm = "tpe"
seed = 5  # TPE's first trials are random: 0.01 for trials 1 and 2, the hopeless 1e-7 for trial 3
max_trials = 3
max_parallel_trials = 1
early_stopping = "median"
warmup_epochs = 1
min_trials = 1
[sweep.fixed]
"train.epochs" = 2
"train.steps_per_epoch" = 20
"train.batch_size" = 128
[params."train.learning_rate"]
type = "categorical"
values = [0.01, 1e-7]
[params."train.model.first_layer_size"]
type = "int"
low = 8
high = 64
"""
QUERY = ("SELECT education, count(*) AS people, avg(p.probability) AS positive_rate "
         "FROM (SELECT *, predict_income(struct(*)) AS p FROM features) GROUP BY education")


@pytest.fixture(scope="module")
def data(spark, tmp_path_factory):
    root = tmp_path_factory.mktemp("tracking-data")
    dataset = prepared_dataset(spark, root, PEOPLE, 3.0, 11)
    return root, census_overrides(root / "raw", dataset, PEOPLE) + [f"train.dataset={dataset}"]


def tfos(*args: str, overrides: list[str]) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "tfos"), *args, "--config", str(CENSUS), *[a for s in overrides for a in ("--set", s)]]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


@pytest.fixture(scope="module")
def trained(data, mlflow_server, tmp_path_factory):
    root, overrides = data
    model_dir = tmp_path_factory.mktemp("tracked") / "model"
    sets = [*overrides, *FAST, f"train.model_dir={model_dir}", f"tracking.uri={mlflow_server.uri}",
            "tracking.experiment=census-tests"]
    proc = tfos("train", "--register", "census", "--alias", "candidate", overrides=sets)
    return model_dir, proc


def client(server):
    from mlflow import MlflowClient

    return MlflowClient(server.uri)


def test_train_logs_params_epochs_figures_and_the_model(trained, mlflow_server):
    model_dir, proc = trained
    c = client(mlflow_server)
    experiment = c.get_experiment_by_name("census-tests")
    [run] = c.search_runs([experiment.experiment_id], filter_string="tags.`tfos.command` = 'train'")
    assert run.info.status == "FINISHED"
    assert f"tracking: run {run.info.run_id} in experiment 'census-tests'" in proc.stdout
    params = run.data.params
    assert params["train.strategy"] == "local" and params["train.epochs"] == "3"
    assert params["train.batch_size"] == "128" and params["train.dataset"].endswith("dataset")
    assert not any(k.startswith(("features.", "synthetic.")) for k in params)
    epochs = [json.loads(line) for line in (model_dir / "progress.jsonl").read_text().splitlines()]
    for key in ("loss", "val_auc", "examples_per_sec"):
        history = c.get_metric_history(run.info.run_id, key)
        assert [m.step for m in history] == [e["epoch"] for e in epochs] == [1, 2, 3]
        assert [m.value for m in history] == pytest.approx([e[key] for e in epochs])
    metrics = json.loads((model_dir / "metrics.json").read_text())
    assert run.data.metrics["eval_auc"] == pytest.approx(metrics["eval"]["auc"])
    artifacts = {a.path for a in c.list_artifacts(run.info.run_id)}
    assert {"config.json", "feature_spec.json", "learning_curve.png", "metrics.json", "model"} <= artifacts
    assert "model/MLmodel" in {a.path for a in c.list_artifacts(run.info.run_id, "model")}
    version = c.get_model_version_by_alias("census", "candidate")
    assert version.run_id == run.info.run_id
    assert "registered model 'census' version" in proc.stdout and "models:/census@candidate" in proc.stdout


@pytest.mark.slow  # about 25 s: `make test-all`; `make test` keeps the flavour's model served by its signature
def test_the_registered_model_loads_in_mlflow_and_serves_from_sql(spark, data, trained, mlflow_server):
    import mlflow.artifacts
    import mlflow.pyfunc

    _, overrides = data
    model_dir, _ = trained
    cfg = config.load(CENSUS, [*overrides, f"tracking.uri={mlflow_server.uri}"])
    by_alias = sql.run(spark, cfg, QUERY, model="models:/census@candidate", log=lambda line: None)
    by_version = sql.run(spark, cfg, QUERY, model="models:/census/latest", log=lambda line: None)
    by_dir = sql.run(spark, cfg, QUERY, model=str(model_dir), log=lambda line: None)
    assertDataFrameEqual(by_alias, by_dir, rtol=1e-6)
    assertDataFrameEqual(by_version, by_dir, rtol=1e-6)
    # MLflow's own loader gives the same SavedModel's predictions (the UDF's fields as columns).
    rows = spark.sql("SELECT *, predict_income(struct(*)).probability AS expected FROM features LIMIT 50").toPandas()
    mlflow.set_tracking_uri(mlflow_server.uri)
    model = mlflow.pyfunc.load_model("models:/census@candidate")
    got = model.predict(rows.drop(columns=["expected"]))
    assert list(got.columns) == ["probability", "label"]
    assert got["probability"].to_numpy() == pytest.approx(rows["expected"].to_numpy(), abs=1e-6)
    # Loaded again from the same files (spark_udf does so in every task on a local master): the same loaded model.
    files = mlflow.artifacts.download_artifacts("models:/census@candidate")
    first, second = (mlflow.pyfunc.load_model(files).unwrap_python_model() for _ in range(2))
    assert first.scorer is second.scorer and first.scorer is not model.unwrap_python_model().scorer
    # mlflow.pyfunc.spark_udf on the same version scores as the UDF, on struct(*) and on the inputs as columns.
    spec = served_spec(spark, str(model_dir), setting="predict.model")
    spark.udf.register("mlflow_income", mlflow.pyfunc.spark_udf(
        spark, "models:/census@candidate", result_type=udf_return_type(task_of(spec)), env_manager="local"))

    def scored(call: str):
        return spark.sql(f"SELECT education, age, p.probability, p.label FROM (SELECT *, {call} AS p FROM features)")

    expected = scored("predict_income(struct(*))")
    assert expected.count() == PEOPLE
    assertDataFrameEqual(scored("mlflow_income(struct(*))"), expected, rtol=1e-6)
    assertDataFrameEqual(scored(f"mlflow_income({', '.join(spec.model_inputs)})"), expected, rtol=1e-6)
    with pytest.raises(Exception, match=r"the input lacks feature\(s\) \['age', .*\(it has columns \['0', '1'\]\)"):
        scored("mlflow_income(age, workclass)").collect()
    with pytest.raises(Exception, match=r"models:/census@nope does not exist in .*aliases \['candidate'\]"):
        sql.run(spark, cfg, QUERY, model="models:/census@nope", log=lambda line: None)


def test_a_registered_model_of_mlflows_tensorflow_flavour_serves_by_its_signature(spark, mlflow_server):
    import mlflow
    import mlflow.tensorflow
    import tensorflow as tf

    from tfos_jobs import api

    class Double(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="amount")])
        def __call__(self, amount):
            return {"twice": amount * 2.0}

    mlflow.set_tracking_uri(mlflow_server.uri)
    with mlflow.start_run():
        mlflow.tensorflow.log_model(Double(), name="model", registered_model_name="doubler")
    client(mlflow_server).set_registered_model_alias("doubler", "live", "1")
    score = api.register_saved_model(spark, name="doubler", model="models:/doubler@live", tracking_uri=mlflow_server.uri)
    got = spark.sql("SELECT doubler(x).twice AS t FROM VALUES (1.5), (4.0) AS v(x) ORDER BY t").collect()
    assert [r.t for r in got] == [3.0, 8.0]
    assert score.signature.outputs[0].name == "twice"


def test_a_tracking_server_that_is_down_warns_and_training_goes_on(spark, data, tmp_path):
    _, overrides = data
    model_dir = tmp_path / "model"
    down = f"http://127.0.0.1:{free_port()}"
    cfg = config.load(CENSUS, [*overrides, *FAST, f"train.model_dir={model_dir}", f"tracking.uri={down}"])
    lines: list[str] = []
    metrics = tracked.run(spark, cfg, log=lines.append)
    assert metrics["eval"]["auc"] > 0.5 and (model_dir / "saved_model" / "saved_model.pb").exists()
    warnings = [line for line in lines if line.startswith("warning: tracking:")]
    assert len(warnings) == 1 and down in warnings[0] and "the job goes on without logging to it" in warnings[0]
    assert not any(line.startswith("tracking: run ") for line in lines)


@pytest.fixture(scope="module")
def swept(data, mlflow_server, tmp_path_factory):
    _, overrides = data
    work = tmp_path_factory.mktemp("tracked-sweep")
    (work / "sweep.toml").write_text(SWEEP)
    sets = [*overrides, f"sweep.dir={work / 'sweep'}", f"tracking.uri={mlflow_server.uri}",
            "tracking.experiment=census-sweeps"]
    proc = tfos("sweep", "--space", str(work / "sweep.toml"), "--register", "census", "--alias", "champion",
                overrides=sets)
    return work / "sweep", proc


@pytest.mark.slow  # a sweep of trainings, about a minute: `make test-all`
def test_a_sweep_is_a_parent_run_with_a_nested_run_per_trial(swept, mlflow_server):
    import pandas as pd

    sweep_dir, proc = swept
    table = pd.read_csv(sweep_dir / "results.csv").set_index("trial")
    # trial 1 sets the median; the hopeless trial 3 falls below it (trial 2 may, by a little)
    assert table.loc[1, "status"] == "completed" and table.loc[3, "status"] == "pruned"
    counts = table["status"].value_counts()
    c = client(mlflow_server)
    experiment = c.get_experiment_by_name("census-sweeps")
    assert experiment is not None, proc.stdout[-5000:] + proc.stderr[-5000:]
    [parent] = c.search_runs([experiment.experiment_id], filter_string="tags.`tfos.command` = 'sweep'")
    assert parent.info.status == "FINISHED" and parent.data.params["sweep.algorithm"] == "tpe"
    assert parent.data.metrics["trials_completed"] == counts.get("completed", 0)
    assert parent.data.metrics["trials_pruned"] == counts.get("pruned", 0) >= 1
    assert parent.data.metrics["best_val_auc"] == pytest.approx(table["val_auc"][table["status"] == "completed"].max())
    assert {"results.csv", "sweep.png", "model"} <= {a.path for a in c.list_artifacts(parent.info.run_id)}
    trials = c.search_runs([experiment.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    by_number = {int(r.data.tags["tfos.trial"]): r for r in trials}
    assert sorted(by_number) == [1, 2, 3]
    for n, run in by_number.items():
        assert run.data.tags["tfos.status"] == table.loc[n, "status"]
        assert float(run.data.params["train.learning_rate"]) == table.loc[n, "learning_rate"]
        steps = [m.step for m in c.get_metric_history(run.info.run_id, "val_auc")]
        assert steps == list(range(1, int(table.loc[n, "epochs_run"]) + 1))
    assert by_number[3].info.status == "KILLED" and by_number[1].info.status == "FINISHED"
    assert c.get_model_version_by_alias("census", "champion").run_id == parent.info.run_id
    assert "models:/census@champion" in proc.stdout
    assert "warning" not in proc.stdout.lower() and "observer" not in proc.stdout


@pytest.mark.slow  # the sweep above: `make test-all`
def test_the_sweeps_registered_best_model_scores_as_its_best_directory(spark, data, swept, mlflow_server):
    _, overrides = data
    sweep_dir, _ = swept
    cfg = config.load(CENSUS, [*overrides, f"tracking.uri={mlflow_server.uri}"])
    by_alias = sql.run(spark, cfg, QUERY, model="models:/census@champion", log=lambda line: None)
    by_dir = sql.run(spark, cfg, QUERY, model=str(sweep_dir / "best"), log=lambda line: None)
    assertDataFrameEqual(by_alias, by_dir, rtol=1e-6)
