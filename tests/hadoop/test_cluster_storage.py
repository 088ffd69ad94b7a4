"""The slower cases of running on shared-nothing clusters (`make test-all`): the pipeline on S3
(S3Proxy through Spark's S3A connector), parameter-server training and a sweep of TF-cluster
trials on HDFS, and an executor killed mid-training with the model directory on HDFS. The
executors share no disk with the driver or each other."""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from tests.conftest import CENSUS, census_overrides
from tests.hadoop.fixtures import isolated_cluster, minidfs, s3_server  # noqa: F401
from tests.hadoop.isolated import IsolatedCluster
from tests.hadoop.test_pipeline import PEOPLE, TRAIN, sets
from benchmarks.memory import executor_of as executor_jvm_of
from tfos_jobs.storage import Storage

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def three_workers(tmp_path_factory):
    """Parameter-server training needs a chief, a worker and a parameter server: three executors."""
    with IsolatedCluster(tmp_path_factory.mktemp("isolated-3"), workers=3) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def hdfs_dataset(minidfs, isolated_cluster):
    """The embedded data generated and prepared on HDFS by the isolated cluster."""
    root = minidfs.path("/storage-cases")
    conf = ["--config", str(CENSUS), *sets(*census_overrides(f"{root}/raw", f"{root}/dataset", PEOPLE)[1:])]
    isolated_cluster.tfos(["generate", *conf])
    isolated_cluster.tfos(["prepare", *conf])
    return f"{root}/dataset"


def test_the_pipeline_runs_on_s3(s3_server, isolated_cluster):
    root = s3_server.url("pipeline")
    s3 = [f"spark.conf.{k}={v}" for k, v in s3_server.spark_conf(jars=False).items()]
    jars = "spark.jars=[" + ", ".join(json.dumps(j) for j in s3_server.jars()) + "]"
    paths = [*census_overrides(f"{root}/raw", f"{root}/dataset", PEOPLE)[1:], f"train.dataset={root}/dataset",
             f"train.model_dir={root}/model", f"predict.model={root}/model", f"predict.output={root}/predictions"]
    conf = ["--config", str(CENSUS), *sets(*paths, *TRAIN, *s3, jars)]
    for step in ("generate", "prepare", "train", "predict"):
        isolated_cluster.tfos([step, *conf])
    query = "SELECT COUNT(*) AS n, AVG(predict_income(struct(*)).probability) AS p FROM features"
    out = isolated_cluster.tfos(["sql", *conf, "-e", query])
    keys = s3_server.list_keys("pipeline/")
    assert "pipeline/model/saved_model/saved_model.pb" in keys and "pipeline/model/metrics.json" in keys
    assert not any(k.startswith(("pipeline/model/backup/", "pipeline/model/_run/")) for k in keys)
    status, body = s3_server.request("GET", f"/{s3_server.bucket}/pipeline/model/metrics.json")
    metrics = json.loads(body)
    assert status == 200 and metrics["eval"]["auc"] > 0.8 and [n["role"] for n in metrics["nodes"]] == ["chief", "worker"]
    status, body = s3_server.request("GET", f"/{s3_server.bucket}/pipeline/predictions/_prediction.json")
    assert json.loads(body)["rows"] == PEOPLE
    assert f"|{PEOPLE}|" in out.stdout.replace(" ", "")  # the UDF scored every person


def test_parameter_server_training_and_a_sweep_of_cluster_trials_on_hdfs(spark, minidfs, hdfs_dataset, three_workers,
                                                                         tmp_path):
    storage = Storage(spark)
    model = minidfs.path("/storage-cases/ps-model")
    three_workers.tfos(["train", "--config", str(CENSUS), *sets(
        f"train.dataset={hdfs_dataset}", f"train.model_dir={model}", *TRAIN, "train.strategy=parameter_server",
        "train.workers=1", "train.ps=1")])
    metrics = json.loads(storage.read_text(f"{model}/metrics.json"))
    assert sorted(n["role"] for n in metrics["nodes"]) == ["chief", "ps", "worker"]
    assert len({n["executor_id"] for n in metrics["nodes"]}) == 3 and metrics["eval"]["auc"] > 0.75
    assert storage.exists(f"{model}/saved_model/saved_model.pb")

    sweep_dir = minidfs.path("/storage-cases/sweep")
    space = tmp_path / "sweep.toml"  # read by the driver only
    space.write_text(f'[sweep]\ndir = "{sweep_dir}"\nalgorithm = "grid"\nmax_trials = 2\nmax_parallel_trials = 1\n'
                     'workers_per_trial = 2\nfixed = {"train.epochs" = 2, "train.batch_size" = 128}\n'
                     '[params."train.learning_rate"]\ntype = "categorical"\nvalues = [0.01, 0.003]\n')
    out = three_workers.tfos(["sweep", "--config", str(CENSUS), "--space", str(space),
                              *sets(f"train.dataset={hdfs_dataset}")])
    assert "trial 001 completed" in out.stdout and "trial 002 completed" in out.stdout
    results = {rel for rel, _ in storage.tree(sweep_dir)}
    assert {"results.parquet", "results.csv", "sweep.png", "best/trial.json", "best/saved_model/saved_model.pb",
            "trial-001/metrics.json", "trial-002/saved_model/saved_model.pb", "study.journal"} <= results
    table = spark.read.parquet(f"{sweep_dir}/results.parquet").orderBy("trial").collect()
    assert [r["status"] for r in table] == ["completed", "completed"] and all(r["val_auc"] > 0.7 for r in table)


def test_an_executor_killed_mid_training_resumes_from_the_state_on_hdfs(spark, minidfs, hdfs_dataset, three_workers):
    """After the first epoch the executor of worker-0 is killed. The second attempt's nodes run
    on other executors (no disk in common with the first's): they can only resume from the
    backup the driver published to HDFS."""
    storage = Storage(spark)
    model = minidfs.path("/storage-cases/killed")
    killed: list[int] = []

    def kill_after_first_epoch():
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and not killed:
            try:
                epochs = storage.read_text(f"{model}/progress.jsonl").count("\n") if storage.exists(
                    f"{model}/progress.jsonl") else 0
                records = [rel for rel, _ in storage.tree(f"{model}/_run") if rel.endswith("/nodes/worker-0.json")]
                if epochs >= 1 and records and storage.tree(f"{model}/backup"):
                    pid = json.loads(storage.read_text(f"{model}/_run/{records[0]}"))["pid"]
                    jvm = executor_jvm_of(pid)
                    os.kill(jvm, signal.SIGKILL)
                    killed.append(jvm)
            except Exception:
                pass
            time.sleep(0.5)

    killer = threading.Thread(target=kill_after_first_epoch)
    killer.start()
    out = three_workers.tfos(["train", "--config", str(CENSUS), *sets(
        f"train.dataset={hdfs_dataset}", f"train.model_dir={model}", "train.epochs=4", "train.batch_size=64",
        "train.steps_per_epoch=300",
        "train.max_attempts=3", "train.reservation_timeout=120")])
    killer.join()
    assert killed, "the executor was never killed"
    assert "attempt 1 of 3 failed" in out.stdout and "relaunching the TF cluster" in out.stdout
    metrics = json.loads(storage.read_text(f"{model}/metrics.json"))
    epochs = [e["epoch"] for e in metrics["history"]]
    assert metrics["attempts"] == 2 and sorted(set(epochs)) == [1, 2, 3, 4]
    assert epochs[0] == 1 and epochs.count(1) == 1  # resumed after epoch 1, not restarted
    assert sorted(storage.children(model)) == ["learning_curve.png", "logs", "metrics.json", "progress.jsonl",
                                               "sample_predictions.json", "saved_model"]  # one model, no leftovers
