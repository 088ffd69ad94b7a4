"""The jobs on a real YARN (MiniYARNCluster over MiniDFSCluster), submitted as YARN users submit
them: `tfos submit --master yarn` with this venv packed by `tfos pack-env` and shipped as an
archive on HDFS, every path on HDFS, the TFRecord jar and the sample config from the installed
package. Executors run in YARN containers, each in its own working directory."""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from tests.hadoop import support
from tests.hadoop.fixtures import yarn_cluster, yarn_env_archive  # noqa: F401
from tests.hadoop.test_pipeline import TRAIN, sets
from benchmarks.memory import executor_of as executor_jvm_of
from tfos_jobs import config, resources
from tfos_jobs.data import synthetic
from tfos_jobs.session_builder import UI_RACE_RETRY
from tfos_jobs.storage import Storage

PEOPLE = 4000


def census(root: str, *more: str) -> list[str]:
    """The shipped census sample with every path under `root` (an HDFS URL)."""
    paths = [f"synthetic.output={root}/raw", f"sources.people.path={root}/raw/people",
             f"sources.regions.path={root}/raw/regions", f"sources.events.path={root}/raw/events",
             f"prepare.output={root}/dataset", "prepare.files_per_split=4", f"train.dataset={root}/dataset",
             f"train.model_dir={root}/model", f"predict.model={root}/model", f"predict.output={root}/predictions"]
    return ["--config", "census", *sets(*paths, *more)]


def generate(spark, root: str) -> None:
    """The raw tables, written onto the cluster's HDFS by this process's own Spark."""
    syn = config.load(resources.config_path("census")).synthetic
    synthetic.generate(spark, f"{root}/raw", PEOPLE, syn.events_per_person, syn.seed, syn.as_of)


@pytest.mark.slow  # about 3 minutes on 2 cores: `make test-all`, with the other YARN cases
def test_prepare_train_predict_on_yarn_in_client_mode(spark, yarn_env_archive, yarn_cluster):
    root = yarn_cluster.path("/client")
    generate(spark, root)
    args = census(root, *TRAIN)
    before = len(yarn_cluster.applications())
    runs = {job: yarn_cluster.submit([job, *args], env_archive=yarn_env_archive) for job in ("prepare", "train", "predict")}
    assert "epoch   3/3" in runs["train"].stdout  # the live epoch line, in client mode on the submitting console

    # A driver whose SparkContext met the UI's race with YARN's proxy filter starts again, as a
    # new application, saying so once; the one it left behind failed before any job ran.
    expected = []
    for job, run in runs.items():
        expected += [(f"tfos {job}", "FAILED")] * run.stderr.count(UI_RACE_RETRY) + [(f"tfos {job}", "SUCCEEDED")]
    apps = yarn_cluster.applications()[before:]
    assert [(a["name"], a["finalStatus"]) for a in apps] == expected, [(a["name"], a.get("diagnostics")) for a in apps]

    storage = Storage(spark)
    metrics = json.loads(storage.read_text(f"{root}/model/metrics.json"))
    nodes = metrics["nodes"]
    assert [n["role"] for n in nodes] == ["chief", "worker"] and len({n["executor_id"] for n in nodes}) == 2
    # each TF node ran the shipped environment, unpacked in its own container's directory
    assert all(n["python"].endswith("/tfos-env/bin/python") and "/container_" in n["python"] for n in nodes), nodes
    assert len({n["python"] for n in nodes}) == 2
    assert metrics["attempts"] == 1 and metrics["eval"]["auc"] > 0.8
    predictions = spark.read.parquet(f"{root}/predictions")
    assert predictions.count() == PEOPLE
    assert json.loads(storage.read_text(f"{root}/predictions/_prediction.json"))["rows"] == PEOPLE
    assert predictions.where("predicted_probability IS NULL OR predicted_probability < 0 "
                             "OR predicted_probability > 1").count() == 0
    assert yarn_cluster.running_containers() == []


@pytest.mark.slow
def test_prepare_train_predict_on_yarn_in_cluster_mode(spark, yarn_env_archive, yarn_cluster, tmp_path):
    """The driver runs in the YARN application master, from the archive too; the config reaches it
    shipped with --files (prepare) or read from HDFS (train, predict, sql, whose query file is on HDFS too)."""
    root = yarn_cluster.path("/cluster")
    generate(spark, root)
    storage = Storage(spark)
    shipped = resources.config_path("census")
    storage.upload_file(shipped, f"{root}/conf/census.toml")
    paths = census(root, *TRAIN)[2:]  # the --set arguments
    yarn_cluster.submit(["prepare", "--config", "census.toml", *paths], deploy_mode="cluster",
                        env_archive=yarn_env_archive, options=["--files", shipped], cwd=tmp_path)
    for job in ("train", "predict"):
        yarn_cluster.submit([job, "--config", f"{root}/conf/census.toml", *paths], deploy_mode="cluster",
                            env_archive=yarn_env_archive, cwd=tmp_path)
    storage.write_text(f"{root}/conf/count.sql",
                       "SELECT COUNT(*) AS n, AVG(predict_income(struct(*)).probability) AS p FROM features")
    for engine in ("python", "jvm"):
        yarn_cluster.submit(["sql", "--config", f"{root}/conf/census.toml", *paths, "--set", f"predict.engine={engine}",
                             "-f", f"{root}/conf/count.sql", "--output", f"{root}/sql-{engine}"],
                            deploy_mode="cluster", env_archive=yarn_env_archive, cwd=tmp_path)

    apps = yarn_cluster.applications()[-5:]
    assert [(a["name"], a["finalStatus"]) for a in apps] == [
        ("tfos prepare", "SUCCEEDED"), ("tfos train", "SUCCEEDED"), ("tfos predict", "SUCCEEDED"),
        ("tfos sql", "SUCCEEDED"), ("tfos sql", "SUCCEEDED")]
    train_app = apps[1]["id"]
    driver_out = next(text for name, text in yarn_cluster.container_logs().items()
                      if name.startswith(f"{train_app}/") and "_000001/stdout" in name)
    assert "epoch   3/3" in driver_out  # the driver's epoch lines, in the application master's log
    metrics = json.loads(storage.read_text(f"{root}/model/metrics.json"))
    assert [n["role"] for n in metrics["nodes"]] == ["chief", "worker"] and metrics["eval"]["auc"] > 0.8
    assert all(n["python"].endswith("/tfos-env/bin/python") for n in metrics["nodes"])
    assert spark.read.parquet(f"{root}/predictions").count() == PEOPLE
    [row] = spark.read.parquet(f"{root}/sql-python").collect()  # the UDF, serving the model from HDFS in containers
    assert row["n"] == PEOPLE and 0 < row["p"] < 1
    # the same function scored in the containers' JVMs: TensorFlow Java's jars shipped by the driver in the AM
    [jvm] = spark.read.parquet(f"{root}/sql-jvm").collect()
    assert jvm["n"] == PEOPLE and jvm["p"] == pytest.approx(row["p"], abs=1e-6)
    assert not list(tmp_path.iterdir())  # nothing was written where it was submitted from

    # A model of the user's own, in the directory it is submitted from and nowhere else: `tfos submit`
    # ships it with --py-files to the driver in the application master and to the executors.
    modules = tmp_path.parent / f"{tmp_path.name}-models"
    modules.mkdir()
    (modules / "teamnets.py").write_text((support.ROOT / "examples" / "mymodels.py").read_text())
    own = [*paths, "--set", "train.model.kind=teamnets:build", "--set", "train.learning_rate=0.01",
           "--set", "train.model.params.cross_layers=1",
           "--set", "train.model.params.deep_units=[16]", "--set", f"train.model_dir={root}/own-model"]
    submitted = yarn_cluster.submit(["train", "--config", f"{root}/conf/census.toml", *own], deploy_mode="cluster",
                                    env_archive=yarn_env_archive, cwd=modules,
                                    options=["--verbose"])
    assert f"{modules / 'teamnets.py'}" in submitted.stdout + submitted.stderr  # in spark-submit's --py-files
    assert yarn_cluster.applications()[-1]["finalStatus"] == "SUCCEEDED"
    own_metrics = json.loads(storage.read_text(f"{root}/own-model/metrics.json"))
    assert own_metrics["model"] == {"kind": "teamnets:build", "params": {"cross_layers": 1, "deep_units": [16]}}
    assert [n["role"] for n in own_metrics["nodes"]] == ["chief", "worker"] and own_metrics["eval"]["auc"] > 0.7


@pytest.mark.slow
def test_a_container_killed_mid_training_is_replaced_and_the_run_resumes(spark, yarn_env_archive, yarn_cluster):
    """After the first epoch the container of worker-0 (found through the NodeManager) is
    killed. YARN gives Spark a new container; the second attempt resumes from the backup on HDFS."""
    root = yarn_cluster.path("/killed")
    generate(spark, root)
    yarn_cluster.submit(["prepare", *census(root)], env_archive=yarn_env_archive)
    storage = Storage(spark)
    model = f"{root}/model"
    killed: list[str] = []
    errors: list[str] = []
    finished = threading.Event()

    def kill_after_first_epoch():
        while not finished.is_set() and not killed:
            try:
                epochs = storage.read_text(f"{model}/progress.jsonl").count("\n") if storage.exists(
                    f"{model}/progress.jsonl") else 0
                records = [rel for rel, _ in storage.tree(f"{model}/_run") if rel.endswith("/nodes/worker-0.json")]
                if epochs >= 1 and records and storage.tree(f"{model}/backup"):
                    jvm = executor_jvm_of(json.loads(storage.read_text(f"{model}/_run/{records[0]}"))["pid"])
                    app = next(a["id"] for a in yarn_cluster.applications() if a["state"] == "RUNNING")
                    container = next(c for c, pid in yarn_cluster.container_pids(app).items() if pid == jvm)
                    os.kill(jvm, signal.SIGKILL)
                    killed.append(container)
            except Exception as e:  # not yet: HDFS files half there, the node not started, ...
                errors.append(repr(e))
            time.sleep(0.5)

    killer = threading.Thread(target=kill_after_first_epoch)
    killer.start()
    try:  # epochs of ~10 s: time to see the first one end and kill before the second does
        out = yarn_cluster.submit(["train", *census(root, "train.epochs=3", "train.batch_size=64",
                                                     "train.steps_per_epoch=1500", "train.max_attempts=3",
                                                     "train.reservation_timeout=180")], env_archive=yarn_env_archive)
    finally:
        finished.set()
        killer.join()
    assert killed, f"the container was never killed; last errors: {errors[-3:]}"
    assert "attempt 1 of 3 failed" in out.stdout and "relaunching the TF cluster" in out.stdout
    metrics = json.loads(storage.read_text(f"{model}/metrics.json"))
    epochs = [e["epoch"] for e in metrics["history"]]
    assert metrics["attempts"] == 2 and sorted(set(epochs)) == [1, 2, 3]
    assert epochs[0] == 1 and epochs.count(1) == 1  # resumed after epoch 1, not restarted
    assert killed[0] not in {n["python"].split("/tfos-env/")[0].rsplit("/", 1)[1] for n in metrics["nodes"]}
    assert sorted(storage.children(model)) == ["learning_curve.png", "logs", "metrics.json", "progress.jsonl",
                                               "sample_predictions.json", "saved_model"]  # one model, no leftovers


@pytest.mark.slow
def test_a_sweep_of_tf_cluster_trials_runs_in_yarn_containers(spark, yarn_env_archive, yarn_cluster, tmp_path):
    root = yarn_cluster.path("/sweep")
    generate(spark, root)
    yarn_cluster.submit(["prepare", *census(root)], env_archive=yarn_env_archive)
    space = tmp_path / "sweep.toml"  # read by the driver, here (client mode)
    space.write_text(f'[sweep]\ndir = "{root}/sweep"\nalgorithm = "grid"\nmax_trials = 2\nmax_parallel_trials = 1\n'
                     'workers_per_trial = 2\nfixed = {"train.epochs" = 2, "train.batch_size" = 128}\n'
                     '[params."train.learning_rate"]\ntype = "categorical"\nvalues = [0.01, 0.003]\n')
    out = yarn_cluster.submit(["sweep", *census(root), "--space", str(space)], env_archive=yarn_env_archive)
    assert "trial 001 completed" in out.stdout and "trial 002 completed" in out.stdout
    storage = Storage(spark)
    files = {rel for rel, _ in storage.tree(f"{root}/sweep")}
    assert {"results.parquet", "sweep.png", "best/saved_model/saved_model.pb", "trial-002/metrics.json"} <= files
    table = spark.read.parquet(f"{root}/sweep/results.parquet").orderBy("trial").collect()
    assert [r["status"] for r in table] == ["completed", "completed"] and all(r["val_auc"] > 0.7 for r in table)
