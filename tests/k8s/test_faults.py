"""Faults and refusals on Kubernetes: an executor pod deleted mid-training (Kubernetes gives Spark a
new pod, where the lost node's task runs again while the chief's stays; the run goes on from its
last step checkpoint, mid-epoch, and exports once), a driver pod that fails
(its error, not spark-submit's 0), an image the node does not have, and GPU executors' pod specs
(checked as Spark writes them: this machine has no GPU to schedule them on)."""
from __future__ import annotations

import json
import threading
import time

import pytest

from tests.conftest import ROOT
from tests.k8s.conftest import TIMES, Cluster, wait_for
from tfos_jobs.config import load
from tfos_jobs.contracts.metrics import FAILURE
from tfos_jobs.jobs.train.driver.gpu import GPU_VENDOR

pytestmark = pytest.mark.k8s
CHECKPOINT_STEPS = 50
STEPS_PER_EPOCH = 150


def executor_pod_of(cluster: Cluster, app: str, executor_id: str) -> str | None:
    pods = cluster.pods(f"spark-role=executor,spark-app-name={app},spark-exec-id={executor_id}")
    return pods[0]["metadata"]["name"] if pods else None


def test_an_executor_pod_deleted_mid_training_costs_an_attempt_not_the_run(cluster, dataset):
    root = "k8s/faults/model"
    model_dir = cluster.stored(root)
    killed: list[str] = []

    def delete_worker_pod_after_first_epoch():
        def first_epoch_done():
            progress = model_dir / "progress.jsonl"
            nodes = list(model_dir.glob("_run/*/nodes/worker-0.json"))
            return progress.exists() and progress.read_text().count("\n") >= 1 and nodes and nodes[0]
        node = wait_for("the first epoch", first_epoch_done, timeout=900)
        pod = executor_pod_of(cluster, "tfos-train-faults", json.loads(node.read_text())["executor_id"])
        assert pod, "worker-0's executor pod not found"
        cluster.kubectl("delete", "pod", pod, "--grace-period=0", "--force", "--wait=false")
        killed.append(pod)

    deleter = threading.Thread(target=delete_worker_pod_after_first_epoch, daemon=True)
    deleter.start()
    t0 = time.monotonic()
    proc = cluster.submit(["train", "--config", "census", "--set", f"train.dataset={dataset}",
                           "--set", f"train.model_dir={cluster.url(root)}", "--set", "train.epochs=4",
                           "--set", "train.batch_size=64", "--set", f"train.steps_per_epoch={STEPS_PER_EPOCH}",
                           "--set", "train.max_attempts=3", "--set", "train.reservation_timeout=300",
                           "--set", f"train.checkpoint_steps={CHECKPOINT_STEPS}", "--overwrite"],
                          options=["--name", "tfos-train-faults"])
    TIMES["train, an executor pod deleted"] = time.monotonic() - t0
    deleter.join(timeout=60)
    assert killed, "no executor pod was deleted"
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = cluster.driver_log(proc)
    assert "attempt 1 of 3 failed" in log and "relaunching the TF cluster" in log
    metrics = json.loads((model_dir / "metrics.json").read_text())
    epochs = [e["epoch"] for e in metrics["history"]]
    assert metrics["attempts"] == 2 and metrics["epochs"] == 4
    assert sorted(set(epochs)) == [1, 2, 3, 4] and epochs.count(1) == 1  # resumed, not restarted
    [recovery] = metrics["recoveries"]
    assert (recovery["nodes_kept"], recovery["nodes_restarted"]) == (["chief-0"], ["worker-0"]), log[-3000:]
    assert recovery["cause"] == FAILURE and recovery["workers"] == 2
    assert 150 <= recovery["resumed_at_steps"] <= recovery["failed_at_steps"], recovery
    # A checkpoint falls at each epoch's end and every `interval` steps after it (checkpoint_steps rounded up to whole
    # calls of steps_per_execution): the run resumed at one of those.
    interval = load(ROOT / "conf" / "census.toml", [f"train.checkpoint_steps={CHECKPOINT_STEPS}",
                                                    f"train.steps_per_epoch={STEPS_PER_EPOCH}"]).train.checkpoint_interval()
    assert interval >= CHECKPOINT_STEPS
    assert recovery["resumed_at_steps"] % STEPS_PER_EPOCH % interval == 0, (interval, recovery)
    # at most the steps since the last checkpoint, and those of one being written when the pod went
    assert 0 <= recovery["trained_again"] <= 2 * interval, (interval, recovery)
    assert f"attempt 2 resumed at step {recovery['resumed_at_steps']:,}" in log, log[-3000:]
    assert (model_dir / "saved_model" / "saved_model.pb").exists()
    assert not (model_dir / "_run").exists() and not (model_dir / "backup").exists()


def test_a_failed_driver_pod_fails_tfos_submit_with_the_drivers_error(cluster):
    proc = cluster.submit(["train", "--config", "census", "--set", f"train.dataset={cluster.url('k8s/nowhere')}",
                           "--set", f"train.model_dir={cluster.url('k8s/nowhere-model')}"])
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "tfos submit: error: the driver pod tfos/" in proc.stderr and "failed (exit code 2)" in proc.stderr
    assert f"tfos train: error: train.dataset" in proc.stderr, proc.stderr[-3000:]


def test_an_image_the_node_does_not_have_is_reported_and_its_pod_deleted(cluster):
    proc = cluster.submit(["prepare", "--config", "census"], executors=1, timeout=300,
                          options=["--conf", "spark.kubernetes.container.image=localhost/no-such-image:1",
                                   "--name", "tfos-no-image"])
    assert proc.returncode == 1
    assert "image 'localhost/no-such-image:1' is not on the node and cannot be pulled" in proc.stderr
    wait_for("the driver pod's deletion", lambda: not cluster.pods("spark-app-name=tfos-no-image"), timeout=120)


def test_gpu_executors_request_gpus_in_their_pod_spec(cluster, dataset):
    """Training with train.gpus_per_worker=1: Spark's resource settings become nvidia.com/gpu
    limits on the executor pods, which stay Pending here (no GPU node); the app is then stopped."""
    proc = cluster.start(["train", "--config", "census", "--set", f"train.dataset={dataset}",
                          "--set", f"train.model_dir={cluster.url('k8s/gpu-model')}", "--set", "train.gpus_per_worker=1"],
                         options=["--name", "tfos-gpu"])
    try:
        pods = wait_for("GPU executor pods", lambda: cluster.pods("spark-role=executor,spark-app-name=tfos-gpu"),
                        timeout=300)
        for pod in pods:
            container = pod["spec"]["containers"][0]
            assert container["resources"]["limits"][f"{GPU_VENDOR}/gpu"] == "1"
            assert pod["status"]["phase"] == "Pending"
        assert any("Insufficient nvidia.com/gpu" in c.get("message", "")
                   for pod in pods for c in pod["status"].get("conditions", []))
        driver = cluster.pods("spark-role=driver,spark-app-name=tfos-gpu")[0]
        assert "nvidia.com/gpu" not in json.dumps(driver["spec"]["containers"][0]["resources"])
    finally:
        cluster.kubectl("delete", "pods", "-l", "spark-app-name=tfos-gpu", "--wait=true", check=False, timeout=180)
        proc.terminate()
        proc.wait(timeout=120)
