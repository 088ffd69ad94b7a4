"""Training under faults on a real local-cluster: killed executors, a hung step."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import pytest

from tfos_jobs.cluster.node.lifecycle import alive

pytestmark = pytest.mark.slow  # about 3 minutes: run by `make test-all`

from benchmarks.memory import executor_of as executor_jvm_of
from tests.cluster.test_training import checkpoint_position, published_position
from tests.commands import kill_started, start, tfos_command
from tests.conftest import ROOT, prepared_dataset

PEOPLE = 6000


@pytest.fixture(scope="module")
def dataset(spark, tmp_path_factory):
    return prepared_dataset(spark, tmp_path_factory.mktemp("faults"), PEOPLE, 3.0, 9)


@pytest.fixture(autouse=True)
def nothing_left_running():
    yield
    kill_started()


def start_train(dataset: Path, model_dir: Path, *overrides: str, tmpfs: tuple[Path, str] | None = None,
                path: Path | None = None) -> subprocess.Popen:  # later --set wins
    """`tmpfs`: (directory, size): the run (driver and executors) sees a tmpfs of that size there,
    mounted in a mount namespace of its own. `path`: a directory of modules the driver imports besides the checkout."""
    # 600 steps of 64 examples per epoch: epochs of a few seconds, so a kill after the first lands mid-run
    sets = [f"train.dataset={dataset}", f"train.model_dir={model_dir}", "train.batch_size=64", "train.steps_per_epoch=600",
            "spark.conf.spark.ui.showConsoleProgress=false", "train.reservation_timeout=90",
            "spark.master=local-cluster[2,1,1536]", f"spark.conf.spark.executorEnv.PYTHONPATH={ROOT}", *overrides]
    cmd = tfos_command("train", *sets)
    if path is not None:
        cmd = ["env", f"PYTHONPATH={ROOT}{os.pathsep}{path}", *cmd]
    if tmpfs is not None:
        where, size = tmpfs
        cmd = ["unshare", "-m" if os.geteuid() == 0 else "-rm", "sh", "-c",
               f'mount -t tmpfs -o size={size} tmpfs "{where}" && exec "$@"', "sh", *cmd]
    return start(cmd)


def start_ps_train(dataset: Path, model_dir: Path, workers: int, max_attempts: int) -> subprocess.Popen:
    """Parameter-server training over 4 epochs: a chief, `workers` workers and one ps, one executor each."""
    return start_train(dataset, model_dir, f"spark.master=local-cluster[{workers + 2},1,1536]",
                       "train.strategy=parameter_server", f"train.workers={workers}", "train.ps=1", "train.epochs=4",
                       f"train.max_attempts={max_attempts}")


def run_killing_executor_of(proc: subprocess.Popen, model_dir: Path, node: str,
                            ready: Callable[[], bool] = lambda: True) -> tuple[str, str, list[int]]:
    """Let `proc` train; once an epoch is done and `ready()`, SIGKILL the executor JVM of TF node
    `node` (e.g. "worker-0"). Returns stdout, stderr and the killed JVM's pid (if any)."""
    killed: list[int] = []

    def kill_after_first_epoch():
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and proc.poll() is None:
            progress = model_dir / "progress.jsonl"
            nodes = list(model_dir.glob(f"_run/*/nodes/{node}.json"))
            if progress.exists() and progress.read_text().count("\n") >= 1 and nodes and ready():
                jvm = executor_jvm_of(json.loads(nodes[0].read_text())["pid"])
                os.kill(jvm, signal.SIGKILL)
                killed.append(jvm)
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_after_first_epoch)
    killer.start()
    out, err = proc.communicate(timeout=900)
    killer.join()
    return out, err, killed


def test_a_killed_executor_costs_an_attempt_not_the_run(dataset, tmp_path):
    """Killed after epoch 1, once a step checkpoint published early in an epoch shows: the
    relaunch resumes at the last step checkpoint, and trains again at most the steps since then
    (100, plus those done while that checkpoint was being published). The chief's task stays
    (its inputs are not sent again); the lost worker's runs again on the executor that
    replaces the killed one."""
    model_dir = tmp_path / "model"
    checkpoint_position(tmp_path)  # TensorFlow imported before the run: the checks below are quick

    def early_in_an_epoch() -> bool:
        position = published_position(model_dir / "backup")
        return position is not None and position[0] >= 1 and position[1] < 400

    proc = start_train(dataset, model_dir, "train.epochs=4", "train.max_attempts=3", "train.checkpoint_steps=100")
    out, err, killed = run_killing_executor_of(proc, model_dir, "worker-0", early_in_an_epoch)
    assert killed, "the executor was never killed"
    assert proc.returncode == 0, out[-3000:] + err[-5000:]
    assert "attempt 1 of 3 failed after " in out and "relaunching the TF cluster" in out
    m = json.loads((model_dir / "metrics.json").read_text())
    assert m["attempts"] == 2, out[-6000:]
    assert m["epochs"] == 4
    epochs = [e["epoch"] for e in m["history"]]
    assert sorted(set(epochs)) == [1, 2, 3, 4] and epochs[0] == 1  # resumed, not restarted
    assert epochs.count(1) == 1
    [recovery] = m["recoveries"]
    assert recovery["attempt"] == 2 and recovery["resumed_at_steps"] > 600
    assert recovery["resumed_at_steps"] % 100 == 0  # a step checkpoint's (or an epoch's end)
    assert recovery["trained_again"] <= 200
    assert (recovery["nodes_kept"], recovery["nodes_restarted"]) == (["chief-0"], ["worker-0"]), out[-3000:]
    assert f"attempt 2 resumed at step {recovery['resumed_at_steps']:,} of the " in out
    assert "chief-0 kept its task and inputs, worker-0 started on a new task" in out
    assert (model_dir / "saved_model" / "saved_model.pb").exists()
    assert sorted(p.name for p in model_dir.iterdir()) == [
        "learning_curve.png", "logs", "metrics.json", "progress.jsonl", "sample_predictions.json", "saved_model"]


def test_a_custom_training_loop_killed_mid_run_resumes_at_its_last_step_checkpoint(dataset, tmp_path):
    """A training function's own tf.GradientTape loop (examples/mytraining.py, `ctx.loop`) on two workers, a worker's
    executor killed after epoch 1: the relaunch restores the model, the optimizer and the position from the loop's
    last step checkpoint, each worker's data skipped to there, and trains on."""
    model_dir = tmp_path / "model"
    proc = start_train(dataset, model_dir, "train.epochs=3", "train.max_attempts=3", "train.checkpoint_steps=100",
                       "train.fn=mytraining:loop", path=ROOT / "examples")  # the driver imports it; executors get it
    out, err, killed = run_killing_executor_of(proc, model_dir, "worker-0")
    assert killed, "the executor was never killed"
    assert proc.returncode == 0, out[-3000:] + err[-5000:]
    assert "relaunching the TF cluster" in out
    m = json.loads((model_dir / "metrics.json").read_text())
    assert m["attempts"] == 2 and m["model"]["kind"] == "mytraining:loop"
    epochs = [e["epoch"] for e in m["history"]]
    assert sorted(set(epochs)) == [1, 2, 3] and epochs.count(1) == 1  # resumed, not restarted
    [recovery] = m["recoveries"]
    assert recovery["resumed_at_steps"] >= 600 and recovery["resumed_at_steps"] % 100 == 0, recovery
    assert recovery["trained_again"] <= 200, recovery
    assert m["eval"]["auc"] > 0.75, m["eval"]
    assert (model_dir / "saved_model" / "saved_model.pb").exists()


@pytest.fixture(scope="module")
def tate(spark, tmp_path_factory):
    from tests.cluster.test_two_tower import prepare_tate

    return prepare_tate(spark, tmp_path_factory.mktemp("faults-tate"))


def test_a_two_tower_loop_killed_under_multi_worker_mirrored_resumes_at_its_last_step_checkpoint(tate, tmp_path):
    """examples/two_tower.py's tf.GradientTape loop with its contrastive loss on two workers, a worker's executor
    killed after epoch 1: the relaunch resumes from the loop's last step checkpoint (every 20 steps) and trains on."""
    from tests.cluster.test_two_tower import two_tower_command

    model_dir = tmp_path / "model"
    proc = start(two_tower_command(tate, model_dir, "train.fn=two_tower:loop", "train.steps_per_epoch=150",
                                   "train.checkpoint_steps=20", "train.max_attempts=3",
                                   "spark.master=local-cluster[2,1,1536]"))
    out, err, killed = run_killing_executor_of(proc, model_dir, "worker-0")
    assert killed, "the executor was never killed"
    assert proc.returncode == 0, out[-3000:] + err[-5000:]
    assert "relaunching the TF cluster" in out
    m = json.loads((model_dir / "metrics.json").read_text())
    assert m["attempts"] == 2 and m["model"]["kind"] == "two_tower:loop"
    epochs = [e["epoch"] for e in m["history"]]
    assert sorted(set(epochs)) == [1, 2, 3] and epochs.count(1) == 1  # resumed, not restarted
    [recovery] = m["recoveries"]
    assert recovery["resumed_at_steps"] >= 150 and recovery["resumed_at_steps"] % 150 % 20 == 0, recovery
    assert recovery["trained_again"] <= 40, recovery
    assert m["eval"]["top1"] > 0.08, m["eval"]  # 10 times chance among a batch's 128
    assert (model_dir / "saved_model" / "saved_model.pb").exists()


def test_a_two_tower_loop_under_parameter_server_resumes_from_its_epoch_checkpoint_when_a_ps_is_lost(tate, tmp_path):
    """The same loop under parameter_server (its steps scheduled on the worker by the chief's coordinator), the
    parameter server's executor killed after epoch 1: the attempt fails, the relaunch restores the model and the
    optimizer from the last epoch's checkpoint (parameter-server training keeps no other) and trains the rest."""
    from tests.cluster.test_two_tower import two_tower_command

    model_dir = tmp_path / "model"
    proc = start(two_tower_command(tate, model_dir, "train.fn=two_tower:loop", "train.epochs=4",
                                   "train.max_attempts=2", "train.strategy=parameter_server", "train.workers=1",
                                   "train.ps=1", "spark.master=local-cluster[3,1,1536]"))
    out, err, killed = run_killing_executor_of(proc, model_dir, "ps-0")
    assert killed, "the parameter server's executor was never killed"
    assert proc.returncode == 0, out[-3000:] + err[-5000:]
    assert "attempt 1 of 2 failed" in out
    m = json.loads((model_dir / "metrics.json").read_text())
    assert m["attempts"] == 2 and m["model"]["kind"] == "two_tower:loop"
    epochs = [e["epoch"] for e in m["history"]]
    assert epochs[0] == 1 and epochs.count(1) == 1 and sorted(set(epochs)) == [1, 2, 3, 4], epochs
    [recovery] = m["recoveries"]
    assert recovery["resumed_at_steps"] >= m["steps_per_epoch"], recovery
    assert recovery["resumed_at_steps"] % m["steps_per_epoch"] == 0, recovery  # at an epoch's end
    assert m["eval"]["top1"] > 0.08, m["eval"]
    assert (model_dir / "saved_model" / "saved_model.pb").exists()


def test_an_elastic_run_shrinks_when_an_executor_is_gone_for_good_and_grows_when_one_joins(dataset, tmp_path):
    """train.elastic on 2 executors: worker-0's is taken away after epoch 1 and not replaced, so
    after train.elastic.wait_seconds the chief trains alone (the global batch kept); an executor
    asked for then joins, and the run grows back to 2 workers after its next checkpoint. Every
    epoch is trained once, one model is exported, and it has learnt (eval AUC above 0.7: on this
    small dataset every run of this many steps overfits)."""
    from tests.reliability import elastic_run

    model_dir = tmp_path / "model"
    out = elastic(elastic_run.STEADY, dataset, model_dir)
    assert "attempt 1 of 2 failed after " in out
    assert (f"only 1 of 2 TF nodes started within train.elastic.wait_seconds = {elastic_run.WAIT_SECONDS} s, and 1 "
            "executor is registered: the run goes on with fewer workers") in out
    assert "relaunching the TF cluster with 1 worker;" in out and "relaunching the TF cluster with 2 workers;" in out
    assert "1 more executor registered during attempt 3, which ran 1 of train.workers = 2: the run grows to 2" in out
    m = json.loads(out.split("METRICS ", 1)[1])
    assert m["attempts"] == 4, out[-6000:]
    shrunk, grown = m["recoveries"]
    assert (shrunk["cause"], shrunk["workers"], shrunk["attempt"]) == ("shrink", 1, 3)
    assert (grown["cause"], grown["workers"], grown["attempt"]) == ("grow", 2, 4)
    assert shrunk["trained_again"] <= 200 and grown["trained_again"] <= 200  # checkpoints every 100 steps
    assert grown["resumed_at_steps"] > shrunk["resumed_at_steps"]  # it trained alone in between
    assert [e["epoch"] for e in m["history"]] == list(range(1, elastic_run.EPOCHS + 1))  # each epoch once
    assert m["eval"]["auc"] > 0.7
    assert len(m["nodes"]) == 2 and (model_dir / "saved_model" / "saved_model.pb").exists()


def elastic(mode: str, dataset: Path, model_dir: Path) -> str:
    """A run of tests.reliability.elastic_run in `mode`; its output."""
    proc = start([sys.executable, "-m", "tests.reliability.elastic_run", mode, str(dataset), str(model_dir)])
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, out[-4000:] + err[-5000:]
    return out


@pytest.fixture(scope="module")
def demo_dataset(spark, tmp_path_factory):
    """The census demo's data at its own size (conf/census.toml: 100,000 people)."""
    return prepared_dataset(spark, tmp_path_factory.mktemp("demo"), 100_000, 20.0, 42)


def test_an_elastic_run_on_the_demo_learns_what_an_unbroken_run_learns(demo_dataset, tmp_path):
    """The census demo's training, once unbroken and once with worker-0's executor taken away for
    good after epoch 1 (the chief goes on alone, the global batch kept; an executor given back
    may grow it again): the eval AUCs are within 0.01 of each other."""
    from tests.reliability import elastic_run

    unbroken = json.loads(elastic(elastic_run.UNBROKEN, demo_dataset, tmp_path / "unbroken").split("METRICS ", 1)[1])
    out = elastic(elastic_run.DEMO, demo_dataset, tmp_path / "elastic")
    m = json.loads(out.split("METRICS ", 1)[1])
    assert "the run goes on with fewer workers" in out
    assert m["recoveries"][0]["cause"] == "shrink" and m["recoveries"][0]["workers"] == 1, out[-4000:]
    assert [e["epoch"] for e in m["history"]] == [e["epoch"] for e in unbroken["history"]]
    assert unbroken["eval"]["auc"] > 0.88
    assert abs(m["eval"]["auc"] - unbroken["eval"]["auc"]) <= 0.01, (m["eval"], unbroken["eval"])


def test_a_hung_step_fails_the_run_within_the_step_timeout(dataset, tmp_path):
    model_dir = tmp_path / "model"
    proc = start_train(dataset, model_dir, "train.model.kind=tests.cluster.boom:hang", "train.step_timeout=25",
                       "train.max_attempts=1", "train.epochs=1")
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2, out[-2000:] + err[-3000:]
    assert "(train.step_timeout = 25 s): a TF node hangs" in err  # ended by the step timeout, not the test's
    nodes = [json.loads(p.read_text()) for p in model_dir.glob("_run/*/nodes/*.json")]
    assert len(nodes) == 2
    pids = [n["pid"] for n in nodes]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.5)
    assert not [p for p in pids if alive(p)], "hung TF node processes were left running"


def test_a_lost_parameter_server_fails_the_attempt_and_the_retry_resumes(dataset, tmp_path):
    model_dir = tmp_path / "model"
    proc = start_ps_train(dataset, model_dir, workers=1, max_attempts=2)
    out, err, killed = run_killing_executor_of(proc, model_dir, "ps-0")
    assert killed, "the parameter server's executor was never killed"
    assert proc.returncode == 0, out[-3000:] + err[-5000:]
    assert "attempt 1 of 2 failed" in out
    m = json.loads((model_dir / "metrics.json").read_text())
    assert m["attempts"] == 2 and m["epochs"] == 4
    epochs = [e["epoch"] for e in m["history"]]
    assert epochs[0] == 1 and epochs.count(1) == 1 and sorted(set(epochs)) == [1, 2, 3, 4]


def test_a_lost_parameter_server_worker_is_tolerated_then_replaced_at_its_address(dataset, tmp_path):
    model_dir = tmp_path / "model"
    proc = start_ps_train(dataset, model_dir, workers=2, max_attempts=1)
    out, err, killed = run_killing_executor_of(proc, model_dir, "worker-1")
    assert killed, "the worker's executor was never killed"
    assert proc.returncode == 0, out[-3000:] + err[-5000:]
    assert "TF node worker-1 was lost with its executor; training goes on with 1 worker(s)" in out
    assert "TF node worker-1 is back: a new task took its place in the TF cluster" in out, out[-5000:]
    m = json.loads((model_dir / "metrics.json").read_text())
    assert m["attempts"] == 1 and m["lost_nodes"] == ["worker-1"] and m["replaced_nodes"] == ["worker-1"]
    assert [e["epoch"] for e in m["history"]] == [1, 2, 3, 4]  # no relaunch, no epoch repeated
    assert m["eval"]["auc"] > 0.75
    assert (model_dir / "saved_model" / "saved_model.pb").exists()


def test_a_killed_driver_run_again_resumes_after_its_last_finished_epoch(dataset, tmp_path):
    """SIGKILL to the driver of `tfos train` once its second epoch is shown, then the same command
    again: epochs 1-2 are shown as trained before, training goes on from epoch 3 (or from a step
    checkpoint in it), each epoch shown once in all, one export."""
    model_dir = tmp_path / "model"
    first = start_train(dataset, model_dir, "train.epochs=5")
    shown: list[str] = []
    for line in first.stdout:
        shown.append(line)
        if line.startswith("epoch   2/5"):
            first.send_signal(signal.SIGKILL)
            break
    first.wait(timeout=120)
    assert shown[-1].startswith("epoch   2/5"), "".join(shown)[-3000:]
    killed_at = time.time()
    assert (model_dir / "backup").is_dir() and not (model_dir / "saved_model").exists()
    second = start_train(dataset, model_dir, "train.epochs=5")
    out, err = second.communicate(timeout=900)
    assert second.returncode == 0, out[-3000:] + err[-5000:]
    assert f"resuming the unfinished run in file:{model_dir} from its last checkpoint: epochs 1-2 are not " \
           "trained again" in out
    lines = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert [line.endswith("(trained before the resume)") for line in lines] == [True, True, False, False, False]
    m = json.loads((model_dir / "metrics.json").read_text())
    history = m["history"]
    assert [e["epoch"] for e in history] == [1, 2, 3, 4, 5]
    assert all(e["time"] < killed_at for e in history[:2]) and all(e["time"] > killed_at for e in history[2:])
    assert (model_dir / "saved_model" / "saved_model.pb").exists() and not (model_dir / "backup").exists()


def test_a_full_local_disk_fails_the_run_naming_host_and_setting(dataset, tmp_path):
    """Each node's dataset shard does not fit in train.local_dir: the run fails at once (a
    relaunch would meet the same disk), says where and what to change, and publishes nothing."""
    small = tmp_path / "small"
    small.mkdir()
    model_dir = tmp_path / "model"
    proc = start_train(dataset, model_dir, f"train.local_dir={small}", "train.epochs=1", "train.max_attempts=2",
                       tmpfs=(small, "1m"))
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2, out[-2000:] + err[-3000:]
    said = (f"failed: LocalDiskFull: no space left on host {socket.gethostname()} in {small} (a 1.0 MiB disk; "
            f"train.local_dir = '{small}'); a node keeps its dataset shard, resume state and export there: "
            "set train.local_dir to a larger disk on every executor")
    assert said in err, err[-3000:]
    assert "attempt 1 of 2 failed" not in out
    assert sorted(p.name for p in model_dir.iterdir()) == ["_run"]  # no export, no metrics, no resume state
    assert list(small.iterdir()) == []  # outside the run's namespace: nothing was ever written here
