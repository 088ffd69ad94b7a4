"""The whole pipeline with every path on HDFS, on executors that share no disk with the driver
or each other (a standalone cluster whose workers live in mount namespaces of their own), as
users run it: `tfos demo` generates, prepares, trains (two multi-worker-mirrored TF workers),
queries with the UDF and predicts. The same training on local paths (a local-cluster, which
shares this machine's disk) must reach the same eval AUC.

Also: what a user is told, before any TF node starts, when a path cannot be used."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import CENSUS, ROOT, census_overrides
from tests.hadoop.fixtures import hdfs_dir, isolated_cluster, minidfs  # noqa: F401
from tfos_jobs import config
from tfos_jobs.storage import Storage

BIN = Path(sys.executable).parent
PEOPLE = 6000
TRAIN = ["train.epochs=3", "train.batch_size=128", "train.reservation_timeout=90", "train.tensorboard=true"]


def sets(*overrides: str) -> list[str]:
    return [a for s in overrides for a in ("--set", s)]


@pytest.fixture(scope="module")
def pipeline(minidfs, isolated_cluster):
    """`tfos demo` with every path on HDFS: generate, prepare, train, the demo's SQL query with
    the UDF (as `tfos sql` runs it) and predict, in one driver; returns the HDFS root and its output."""
    root = minidfs.path("/pipeline")
    paths = [*census_overrides(f"{root}/raw", f"{root}/dataset", PEOPLE)[1:],  # the cluster's master, not local[2]
             f"train.dataset={root}/dataset", f"train.model_dir={root}/model", f"predict.model={root}/model",
             f"predict.output={root}/predictions", *TRAIN]
    return root, isolated_cluster.tfos(["demo", "--config", str(CENSUS), *sets(*paths)])


@pytest.mark.slow  # the whole demo on HDFS, 2.5 minutes: `make test-all`; `make test` keeps the HDFS checks below
def test_the_pipeline_runs_on_hdfs_on_executors_that_share_no_disk(spark, pipeline, minidfs):
    root, out = pipeline
    storage = Storage(spark)
    assert "records: train" in out.stdout
    metrics = json.loads(storage.read_text(f"{root}/model/metrics.json"))
    assert [n["role"] for n in metrics["nodes"]] == ["chief", "worker"]
    assert len({n["executor_id"] for n in metrics["nodes"]}) == 2  # one TF node per isolated executor
    assert [e["epoch"] for e in metrics["history"]] == [1, 2, 3] and metrics["attempts"] == 1
    assert metrics["eval"]["auc"] > 0.8
    assert "epoch   3/3" in out.stdout  # the live epoch lines reached the driver over the network
    files = dict(storage.tree(f"{root}/model"))
    assert files["saved_model/saved_model.pb"] > 0 and files["learning_curve.png"] > 10_000
    assert any(name.startswith("logs/train/events.out.tfevents") for name in files)  # TensorBoard, published
    assert not any(name.startswith(("backup/", "_run/")) for name in files)  # a finished run leaves no resume state
    progress = storage.read_text(f"{root}/model/progress.jsonl").splitlines()
    assert [json.loads(line)["epoch"] for line in progress] == [1, 2, 3]

    people = spark.read.parquet(f"{root}/raw/people").count()
    predictions = spark.read.parquet(f"{root}/predictions")
    assert people == PEOPLE and predictions.count() == people
    assert predictions.where("predicted_probability IS NULL OR predicted_probability < 0 "
                             "OR predicted_probability > 1").count() == 0
    summary = json.loads(storage.read_text(f"{root}/predictions/_prediction.json"))
    assert summary["rows"] == people and summary["model"] == f"{root}/model/saved_model"
    # the demo's query: predicted against actual positive rate per education level, through the UDF
    rows = [line.split("|")[1:-1] for line in out.stdout.splitlines() if line.startswith("|")][1:]
    assert len(rows) == 16 and sum(int(r[1]) for r in rows) == people
    assert all(0 < float(r[3]) < 1 for r in rows)


@pytest.mark.slow  # a second training, half a minute: `make test-all` (tfos bench's P11 trains both ways too)
def test_training_on_hdfs_learns_what_training_on_local_paths_learns(spark, pipeline, tmp_path):
    """The dataset copied from HDFS to a local directory and trained the same way on a
    local-cluster: the eval AUC must agree within 0.01."""
    root, _ = pipeline
    storage = Storage(spark)
    local = tmp_path / "dataset"
    storage.download(f"{root}/dataset", str(local))
    model_dir = tmp_path / "model"
    cmd = [str(BIN / "tfos"), "train", "--config", str(CENSUS), *sets(f"train.dataset={local}", f"train.model_dir={model_dir}", *TRAIN,
                              "spark.master=local-cluster[2,1,1536]", "spark.conf.spark.ui.showConsoleProgress=false")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    on_local = json.loads((model_dir / "metrics.json").read_text())["eval"]["auc"]
    on_hdfs = json.loads(storage.read_text(f"{root}/model/metrics.json"))["eval"]["auc"]
    assert abs(on_hdfs - on_local) < 0.01, (on_hdfs, on_local)


def test_paths_that_cannot_be_used_fail_before_any_tf_node_starts(spark, minidfs, hdfs_dir, tmp_path):
    from tfos_jobs.jobs.train.driver import job as train
    from tfos_jobs.errors import ConfigError, InputError
    from udfs import register

    def train_with(**paths: str):
        overrides = [f"train.{k}={v}" for k, v in paths.items()]
        return train.run(spark, config.load(CENSUS, [f"train.model_dir={tmp_path / 'model'}", *overrides]))

    with pytest.raises(ConfigError, match=r"train.dataset = 'nosuch://host/ds': no filesystem for this scheme"):
        train_with(dataset="nosuch://host/ds")
    with pytest.raises(InputError, match=r"train.dataset: .*cannot connect"):
        train_with(dataset="hdfs://127.0.0.1:1/ds")
    storage = Storage(spark)
    storage.makedirs(f"{hdfs_dir}/empty")
    with pytest.raises(InputError, match=rf"train.dataset: '{hdfs_dir}/empty' is not a prepared dataset"):
        train_with(dataset=f"{hdfs_dir}/empty")
    with pytest.raises(ConfigError, match=rf"model_dir: model directory '{hdfs_dir}/nowhere' does not exist"):
        register(spark, "p", f"{hdfs_dir}/nowhere")
    assert not (tmp_path / "model").exists()  # nothing was started or written


@pytest.mark.slow  # needs the HDFS pipeline above: `make test-all`
def test_a_model_directory_the_user_may_not_write_is_refused_naming_the_setting(pipeline, minidfs, hdfs_dir):
    """As another user than HDFS's superuser, a model directory inside a directory of mode 700."""
    root, _ = pipeline
    minidfs.shell("-mkdir", "-p", f"{hdfs_dir}/private")
    minidfs.shell("-chmod", "700", f"{hdfs_dir}/private")
    cmd = [str(BIN / "tfos"), "train", "--config", str(CENSUS),
           *sets(f"train.dataset={root}/dataset", f"train.model_dir={hdfs_dir}/private/model", "spark.master=local[1]")]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "HADOOP_USER_NAME": "alice"})
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"train.model_dir = '{hdfs_dir}/private/model': permission denied" in proc.stderr
    assert "user=alice" in proc.stderr and "Traceback" not in proc.stderr
