"""Every step of the pipeline as pods, submitted with `tfos submit --master k8s://...` in cluster
mode (the driver is a pod too) with every path on S3: generate, prepare, train (2 TF workers,
multi_worker_mirrored, one per executor pod), the demo's SQL query with the prediction function,
predict, and `tfos serve-sql` answering a SQL client; a sweep of 2 trials and parameter-server
training in client mode (the driver here, the executors pods). Nothing is shared between pods but
S3 and the network."""
from __future__ import annotations

import json
import secrets
import time

import pyarrow.parquet as pq
import pytest

from tests.hadoop.support import free_port
from tests.k8s.conftest import LOGS, PEOPLE, TIMES, Cluster, submission_pod, wait_for
from tests.serving.clients import dbapi
from tfos_jobs.deploy.kubernetes import IMAGE_PACKAGE
from tfos_jobs.resources import DEMO_QUERIES
from udfs.jvm_engine import SCORES_IN

pytestmark = pytest.mark.k8s

TRAIN = ["train.workers=2", "train.epochs=3", "train.batch_size=256", "train.reservation_timeout=180"]


def sets(*overrides: str) -> list[str]:
    return [a for s in overrides for a in ("--set", s)]


def run(cluster: Cluster, name: str, job: list[str], **kw) -> str:
    """Submits a job, fails with its driver's last lines if it failed, returns spark-submit's output."""
    t0 = time.monotonic()
    proc = cluster.submit(job, **kw)
    TIMES[name] = time.monotonic() - t0
    assert proc.returncode == 0, f"{name}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def pipeline(cluster: Cluster, dataset: str) -> dict[str, str]:
    """train -> the demo's SQL query -> predict on the prepared dataset, each a cluster-mode job;
    the driver pods' logs by job."""
    root = "k8s/pipeline"
    paths = [f"sources.people.path={cluster.url(root + '/raw/people')}",
             f"sources.regions.path={cluster.url(root + '/raw/regions')}",
             f"sources.events.path={cluster.url(root + '/raw/events')}",
             f"train.dataset={dataset}", f"train.model_dir={cluster.url(root + '/model')}",
             f"predict.model={cluster.url(root + '/model')}", f"predict.output={cluster.url(root + '/predictions')}"]
    logs = dict(LOGS)
    for name, job in [
        ("train", ["train", "--config", "census", *sets(*paths, *TRAIN), "--overwrite"]),
        ("sql", ["sql", "--config", "census", *sets(*paths), "-f", f"{IMAGE_PACKAGE}/resources/conf/queries/"
                 f"{DEMO_QUERIES['rows']}", "--output", cluster.url(root + "/by_education")]),
        ("sql (jvm)", ["sql", "--config", "census", *sets(*paths, "predict.engine=jvm"), "-f",
                       f"{IMAGE_PACKAGE}/resources/conf/queries/{DEMO_QUERIES['rows']}",
                       "--output", cluster.url(root + "/by_education_jvm")]),
        ("predict", ["predict", "--config", "census", *sets(*paths), "--overwrite"]),
    ]:
        out = run(cluster, name, job)
        logs[name] = cluster.kubectl("logs", submission_pod(out))
    return logs


def test_generate_and_prepare_write_to_s3_from_pods(cluster, pipeline):
    assert f"people {PEOPLE:,} rows" in pipeline["generate"]
    manifest = json.loads((cluster.stored("k8s/pipeline/dataset/_meta/manifest.json")).read_text())
    splits = manifest["splits"]
    assert sum(s["records"] for s in splits.values()) == PEOPLE, splits
    assert "records: train" in pipeline["prepare"]


def test_two_tf_workers_train_in_two_executor_pods(cluster, pipeline):
    metrics = json.loads(cluster.stored("k8s/pipeline/model/metrics.json").read_text())
    assert [n["role"] for n in metrics["nodes"]] == ["chief", "worker"]
    assert len({n["executor_id"] for n in metrics["nodes"]}) == 2
    assert [e["epoch"] for e in metrics["history"]] == [1, 2, 3] and metrics["attempts"] == 1
    assert metrics["eval"]["auc"] > 0.7
    assert cluster.stored("k8s/pipeline/model/saved_model/saved_model.pb").stat().st_size > 0
    assert "epoch   3/3" in pipeline["train"]  # the live epoch line reached the driver pod


def test_the_demo_query_runs_with_the_prediction_function(cluster, pipeline):
    rows = pq.read_table(cluster.stored("k8s/pipeline/by_education")).to_pylist()
    assert len(rows) == 16 and sum(r["people"] for r in rows) == PEOPLE
    assert all(0 < r["predicted_positive_rate"] < 1 for r in rows)


def test_the_query_gives_the_same_answer_scored_in_the_executor_pods_jvms(cluster, pipeline):
    """TensorFlow Java's jars from the image's package, shipped by the driver pod to the executor pods."""
    python = pq.read_table(cluster.stored("k8s/pipeline/by_education")).to_pylist()
    jvm = pq.read_table(cluster.stored("k8s/pipeline/by_education_jvm")).to_pylist()
    assert SCORES_IN["jvm"] in pipeline["sql (jvm)"] and SCORES_IN["python"] in pipeline["sql"]
    python_by, jvm_by = ({r["education"]: r for r in rows} for rows in (python, jvm))
    assert jvm_by.keys() == python_by.keys() and len(jvm_by) == 16
    for education, row in jvm_by.items():
        theirs = python_by[education]
        assert (row["people"], row["actual_positive_rate"]) == (theirs["people"], theirs["actual_positive_rate"])
        # each probability within 1e-5 of Python's; their average is rounded to 4 places: one step may differ
        assert row["predicted_positive_rate"] == pytest.approx(theirs["predicted_positive_rate"], abs=1.01e-4), education


def test_predict_scores_every_row(cluster, pipeline):
    table = pq.read_table(cluster.stored("k8s/pipeline/predictions"))
    assert table.num_rows == PEOPLE
    keys = table.column("person_id").to_pylist()
    assert len(set(keys)) == PEOPLE
    probabilities = table.column("predicted_probability").to_pylist()
    assert all(p is not None and 0 <= p <= 1 for p in probabilities)


def test_a_sweep_and_parameter_server_training_run_in_client_mode(cluster, dataset):
    """The driver in this process's namespace, its executors pods: a 2-trial sweep, then a
    parameter-server run (1 chief, 1 worker, 1 parameter server: 3 executor pods)."""
    root = "k8s/client"
    run(cluster, "sweep (client)", ["sweep", "--config", "census", "--space", "sweep",
                                    *sets(f"train.dataset={dataset}", f"sweep.dir={cluster.url(root + '/sweep')}",
                                          "sweep.max_trials=2", "sweep.max_parallel_trials=2",
                                          'sweep.fixed={"train.epochs" = 2, "train.steps_per_epoch" = 20}')],
        mode="client", executors=2)
    trials = pq.read_table(cluster.stored(f"{root}/sweep/results.parquet")).to_pylist()
    assert [t["status"] for t in trials] == ["completed", "completed"], trials
    assert all(0.5 < t["val_auc"] <= 1 for t in trials)
    run(cluster, "train parameter_server (client)",
        ["train", "--config", "census", *sets(f"train.dataset={dataset}", f"train.model_dir={cluster.url(root + '/ps')}",
                                              "train.strategy=parameter_server", "train.workers=1", "train.ps=1",
                                              "train.epochs=1", "train.batch_size=256"), "--overwrite"],
        mode="client", executors=3)
    metrics = json.loads(cluster.stored(f"{root}/ps/metrics.json").read_text())
    assert sorted(n["role"] for n in metrics["nodes"]) == ["chief", "ps", "worker"]


def test_serve_sql_answers_a_sql_client_from_a_driver_pod(cluster, pipeline):
    """`tfos serve-sql` in cluster mode: the driver pod serves HiveServer2's protocol with the
    prediction function over the model on S3; its password comes from a Kubernetes Secret."""
    root, password, port = "k8s/pipeline", secrets.token_urlsafe(16), free_port()
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sql-password"},
              "stringData": {"password": password}}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(secret))
    paths = [f"sources.{name}.path={cluster.url(f'{root}/raw/{name}')}" for name in ("people", "regions", "events")]
    proc = cluster.start(["serve-sql", "--config", "census", "--port", str(port),
                          *sets(*paths, f"predict.model={cluster.url(root + '/model')}")],
                         options=["--name", "tfos-serve-sql",
                                  "--conf", "spark.kubernetes.driver.secretKeyRef.TFOS_SQL_PASSWORD=sql-password:password"])

    def answer(statement: str) -> list[tuple]:
        return dbapi(port, statement, password)

    def ready():
        try:
            return answer("SELECT count(*) FROM features")
        except Exception:  # not listening yet, or still registering
            return None

    try:
        t0 = time.monotonic()
        assert wait_for("serve-sql in its pod", ready, timeout=600, interval=3) == [(PEOPLE,)]
        TIMES["serve-sql, submit to first answer"] = time.monotonic() - t0
        rows = answer("SELECT education, avg(predict_income(struct(*)).probability) AS p FROM features GROUP BY education")
        assert len(rows) == 16 and all(0 < p < 1 for _, p in rows)
    finally:
        cluster.kubectl("delete", "pods", "-l", "spark-app-name=tfos-serve-sql", "--wait=true", check=False, timeout=180)
        proc.wait(timeout=180)
        cluster.kubectl("delete", "secret", "sql-password", check=False)
