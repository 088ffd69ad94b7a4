"""Jobs on HDFS under faults of the driver and of HDFS itself, on a MiniDFS of 3 DataNodes with
replication 2 (one DataNode may be lost without losing a block):

  * the driver of `tfos train` killed mid-run, the same command again: it resumes from the state
    on HDFS after its last finished epoch;
  * a DataNode lost while `tfos prepare` writes, and another while `tfos train` runs: the jobs
    complete, and what they wrote reads back whole (the same bytes as without the fault; an
    export that loads and predicts).

Every fault is triggered by what the job has done (a directory on HDFS, an epoch line), not by
time. The lost DataNode is not announced: the NameNode declares it dead when its heartbeats stop
(seconds here, by the shorter heartbeat settings), then has its blocks copied again.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

from tests.commands import kill_started, start, tfos_command
from tests.conftest import ROOT, census_overrides
from tests.hadoop.minidfs import MiniDFS
from tfos_jobs.storage import Storage

pytestmark = pytest.mark.slow  # several minutes: `make test-all`

PEOPLE = 6000
REPLICATION = 2
# A DataNode without heartbeats is declared dead after 2 rechecks + 10 heartbeats: 16 s, not 10.5 min
HEARTBEATS = {"dfs.heartbeat.interval": "1", "dfs.namenode.heartbeat.recheck-interval": "3000"}
LOST: list[str] = []  # the DataNodes stopped so far, in order: each scenario loses a different one


@pytest.fixture(scope="module")
def dfs(tmp_path_factory) -> Iterator[MiniDFS]:
    with MiniDFS(tmp_path_factory.mktemp("dfs-3"), datanodes=3, replication=REPLICATION, conf=HEARTBEATS) as dfs:
        yield dfs


@pytest.fixture(autouse=True)
def nothing_left_running(dfs):
    """Each job runs in a process group of its own, killed when the test ends; a stopped DataNode
    comes back, and the next test starts on 3 live DataNodes that hold every block twice."""
    yield
    kill_started()
    if dfs.running:
        dfs.restart_datanodes()
        wait_for(lambda: (s := dfs.block_state())["live"] == 3 and not s["missing"]
                 and s["replicas"] >= REPLICATION * s["blocks"], 120, "3 live DataNodes holding every block")


@pytest.fixture(scope="module")
def raw(spark, tmp_path_factory) -> Path:
    from tfos_jobs.data import synthetic

    raw = tmp_path_factory.mktemp("hdfs-faults") / "raw"
    synthetic.generate(spark, str(raw), PEOPLE, 3.0, 9, "2026-01-01")
    return raw


@pytest.fixture(scope="module")
def hdfs_dataset(dfs, raw) -> str:
    """The raw data prepared onto HDFS without a fault: the training input, and what a faulty
    prepare must give too."""
    out = dfs.path("/clean/dataset")
    proc = tfos("prepare", *census_overrides(raw, out, PEOPLE))  # type: ignore[arg-type]
    finish(proc, 600)
    return out


def tfos(command: str, *overrides: str) -> subprocess.Popen:
    """`tfos COMMAND --config conf/census.toml --set ...` in a process group of its own; every
    file it writes to HDFS has 2 replicas."""
    sets = [*overrides, "spark.conf.spark.ui.showConsoleProgress=false",
            f"spark.conf.spark.hadoop.dfs.replication={REPLICATION}"]
    return start(tfos_command(command, *sets))


def finish(proc: subprocess.Popen, timeout: float) -> str:
    """The job's stdout, once it succeeded."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out[-3000:]}\n{err[-6000:]}"
    return out


def train(dataset: str, model_dir: str, *overrides: str) -> subprocess.Popen:
    # 64 examples a step: epochs of a few seconds, so that a fault after one lands mid-run
    return tfos("train", f"train.dataset={dataset}", f"train.model_dir={model_dir}", "train.batch_size=64",
                "train.reservation_timeout=90", "spark.master=local-cluster[2,1,1536]",
                f"spark.conf.spark.executorEnv.PYTHONPATH={ROOT}", *overrides)


def wait_for(ready: Callable[[], object], timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:.0f} s: {what}")
        time.sleep(interval)


def lose_a_datanode(dfs: MiniDFS) -> tuple[str, int]:
    """Stop a DataNode no earlier scenario stopped; its name and the replicas it held."""
    name = next(n for n in dfs.datanode_names() if n not in LOST)
    LOST.append(name)
    return name, dfs.stop_datanode(name)


def wait_for_rereplication(dfs: MiniDFS) -> dict[str, int]:
    """Once the NameNode declared the stopped DataNode dead, every block is copied again onto
    the 2 left: the block state then."""
    wait_for(lambda: (s := dfs.block_state())["live"] == 2 and s["replicas"] == REPLICATION * s["blocks"],
             180, "the lost DataNode's blocks copied onto the others")
    return dfs.block_state()


def contents(storage: Storage, root: str) -> dict[str, bytes]:
    """Every file under `root`, by relative path; in the manifest, `root` reads ROOT and the
    moments of the run are left out."""
    files = {rel: storage.read_bytes(f"{root}/{rel}") for rel, _ in storage.tree(root)}
    manifest = json.loads(files.pop("_meta/manifest.json").decode().replace(root, "ROOT"))
    for moment in ("created_at", "seconds"):
        manifest.pop(moment)
    return {**files, "_meta/manifest.json": json.dumps(manifest, sort_keys=True).encode()}


def test_a_datanode_lost_while_prepare_writes_costs_nothing(spark, dfs, raw, hdfs_dataset):
    """Once prepare's staging directory appears on HDFS, a DataNode goes (unannounced): the job
    completes and its dataset reads back the same, byte for byte, as a prepare without a fault."""
    storage = Storage(spark)
    out = dfs.path("/faulted/dataset")
    storage.makedirs(dfs.path("/faulted"))
    proc = tfos("prepare", *census_overrides(raw, out, PEOPLE))  # type: ignore[arg-type]
    wait_for(lambda: proc.poll() is not None or any(c.startswith("dataset.staging-")
                                                    for c in storage.children(dfs.path("/faulted"))),
             600, "prepare's staging directory", 0.2)
    name, replicas = lose_a_datanode(dfs)
    mid_job = proc.poll() is None and not storage.exists(out)
    stopped_at = time.monotonic()
    finish(proc, 600)
    finished_after = time.monotonic() - stopped_at
    assert mid_job, "the DataNode was stopped after prepare had published its dataset"
    assert replicas > 0  # it held blocks of the clean dataset at least: they are read from the other copy

    faulted, clean = contents(storage, out), contents(storage, hdfs_dataset)
    assert sorted(faulted) == sorted(clean) and faulted == clean
    manifest = json.loads(faulted["_meta/manifest.json"])
    assert sum(s["records"] for s in manifest["splits"].values()) == PEOPLE - manifest["rejected"]["rows"]
    assert sorted(manifest["splits"]) == ["eval", "train"]
    assert len([f for f in faulted if f.endswith(".tfrecord")]) == 8  # prepare.files_per_split = 4
    state = wait_for_rereplication(dfs)
    assert state["missing"] == 0
    print(f"\nprepare: DataNode {name} ({replicas} replicas) lost; the job ended {finished_after:.1f} s later; "
          f"{len(faulted)} files read back identical; then {state['replicated']} replicas copied again, "
          f"{state['blocks']} blocks x {REPLICATION} on 2 DataNodes")


def test_a_datanode_lost_while_training_costs_nothing(spark, dfs, hdfs_dataset, tmp_path):
    """After the first epoch line a DataNode goes (not the one prepare lost): the training writes
    the rest of its state, its metrics and its export to HDFS regardless, in one attempt, and the
    export loads and predicts what the training said it would."""
    import tensorflow as tf

    storage = Storage(spark)
    model = dfs.path("/faulted/model")
    proc = train(hdfs_dataset, model, "train.epochs=3", "train.steps_per_epoch=300", "train.max_attempts=1")
    assert proc.stdout is not None
    shown: list[str] = []
    for line in proc.stdout:
        shown.append(line)
        if line.startswith("epoch   1/3"):
            break
    assert shown and shown[-1].startswith("epoch   1/3"), "".join(shown)[-3000:]
    name, replicas = lose_a_datanode(dfs)
    assert proc.poll() is None and not storage.exists(f"{model}/saved_model")  # lost mid-run
    out = "".join(shown) + finish(proc, 900)

    assert "epoch   3/3" in out
    metrics = json.loads(storage.read_text(f"{model}/metrics.json"))
    assert metrics["attempts"] == 1 and [e["epoch"] for e in metrics["history"]] == [1, 2, 3]
    assert metrics["eval"]["auc"] > 0.75
    assert sorted(storage.children(model)) == ["learning_curve.png", "logs", "metrics.json", "progress.jsonl",
                                               "sample_predictions.json", "saved_model"]
    storage.download(f"{model}/saved_model", str(tmp_path / "saved_model"))
    sample = json.loads(storage.read_text(f"{model}/sample_predictions.json"))
    fn = tf.saved_model.load(str(tmp_path / "saved_model")).signatures["serving_default"]
    args = fn.structured_input_signature[1]  # strings, numbers, lists of strings padded as the model takes them
    inputs = {k: tf.constant(v, dtype=args[k].dtype) for k, v in sample["rows"].items()}
    got = fn(**inputs)["probability"].numpy().reshape(-1)
    np.testing.assert_allclose(got, np.asarray(sample["outputs"]).reshape(-1), atol=1e-6)
    assert len(got) > 0 and ((got > 0) & (got < 1)).all() and got.std() > 0.01  # not a constant
    state = wait_for_rereplication(dfs)
    assert state["missing"] == 0
    print(f"\ntrain: DataNode {name} ({replicas} replicas) lost after epoch 1; auc {metrics['eval']['auc']:.3f}; "
          f"then {state['replicated']} replicas copied again")


def test_a_killed_driver_run_again_resumes_from_the_state_on_hdfs(spark, dfs, hdfs_dataset):
    """SIGKILL to the process group of `tfos train` (driver, executors, TF nodes) once its second
    epoch is shown, then the same command again: epochs 1-2 are not trained again, each epoch is
    in the history once, one export, and no resume state is left on HDFS."""
    storage = Storage(spark)
    model = dfs.path("/resumed/model")
    overrides = ("train.epochs=5", "train.steps_per_epoch=600")
    first = train(hdfs_dataset, model, *overrides)
    assert first.stdout is not None
    shown: list[str] = []
    for line in first.stdout:
        shown.append(line)
        if line.startswith("epoch   2/5"):
            os.killpg(first.pid, signal.SIGKILL)
            break
    first.wait(timeout=120)
    killed_at = time.time()
    assert shown and shown[-1].startswith("epoch   2/5"), "".join(shown)[-3000:]
    assert storage.exists(f"{model}/backup") and not storage.exists(f"{model}/saved_model")

    second = train(hdfs_dataset, model, *overrides)
    out = finish(second, 900)
    resumed_in = time.time() - killed_at
    assert f"resuming the unfinished run in {model} from its last checkpoint: epochs 1-2 are not " \
           "trained again" in out
    lines = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert [line.endswith("(trained before the resume)") for line in lines] == [True, True, False, False, False]
    metrics = json.loads(storage.read_text(f"{model}/metrics.json"))
    history = metrics["history"]
    assert [e["epoch"] for e in history] == [1, 2, 3, 4, 5]
    assert all(e["time"] < killed_at for e in history[:2]) and all(e["time"] > killed_at for e in history[2:])
    progress = storage.read_text(f"{model}/progress.jsonl").splitlines()
    assert [json.loads(line)["epoch"] for line in progress] == [1, 2, 3, 4, 5]
    assert storage.exists(f"{model}/saved_model/saved_model.pb")
    assert sorted(storage.children(model)) == ["learning_curve.png", "logs", "metrics.json", "progress.jsonl",
                                               "sample_predictions.json", "saved_model"]  # no backup/, no _run/
    print(f"\nresume: the second run finished {resumed_in:.0f} s after the kill")
