"""Sweeps through the launcher seam, with every trial's nodes played by threads (`tests.unit.
test_launcher.FakeNodes`) under the real supervisor: each trial is a training run whose nodes the
launcher starts, single-process trials are one node that asks the pruner itself, cluster trials
are stopped by the driver, and the time budget stops whatever runs. No Spark: seconds each."""
from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Callable

import pytest

from tfos_jobs import config
from tfos_jobs import control_channel as cc
from tfos_jobs.cluster.driver.launcher import Attempt, Watch
from tfos_jobs.cluster.driver.run_state import RunStopped
from tfos_jobs.cluster.driver.supervise import supervise
from tfos_jobs.contracts.dataset import Manifest, SplitFiles
from tfos_jobs.data import dataset
from tfos_jobs.jobs.sweep.driver import job as sweep_job
from tfos_jobs.config import sweep as sweep_file
from tfos_jobs.search import space
from tfos_jobs.storage import Storage

from tests.conftest import CENSUS
from tests.unit.test_launcher import FakeNodes

# A sweep's report plots whatever its trials left, even nothing: never with a warning.
pytestmark = pytest.mark.filterwarnings("error:No artists with labels:UserWarning")

Script = Callable[[FakeNodes, Attempt], None]


def tiny_dataset(root: Path) -> Path:
    """A dataset's `_meta/` for the census spec: what a sweep reads before it starts trials."""
    spec = config.load(CENSUS).features
    files = SplitFiles(100, (("part-00000.tfrecord", 1000),))
    manifest = Manifest(1, "0", "", 0.0, str(root), {}, spec.fingerprint(), {"record_type": "Example",
                        "compression": ""}, {"train": files, "eval": files}, {}, {}, {})
    dataset.write_meta(Storage(None), f"file:{root}", spec, {}, {f.name: [("a", 1)] for f in spec.with_vocabulary},
                       manifest)
    return root


class TrialLauncher:
    """Plays `script(nodes, attempt)` for every attempt of every trial, under the real supervisor;
    records which trials were launched and whether as a lone node."""

    def __init__(self, script: Script, lone: bool):
        self.script, self.lone = script, lone
        self.launched: list[tuple[int, bool]] = []
        self._lock = threading.Lock()

    def check(self, tr, log) -> None:
        pass

    def run(self, attempt: Attempt, watch: Watch) -> None:
        with self._lock:
            self.launched.append((trial_of(attempt), attempt.state.lone))
        nodes = FakeNodes(attempt.state, lambda n: self.script(n, attempt))
        supervise(nodes, attempt, watch)

    def close(self) -> None:
        """Each attempt's nodes end with it."""


def trial_of(attempt: Attempt) -> int:
    return int(attempt.train.model_dir.rstrip("/").rsplit("-", 1)[1])


def epoch(n: int, auc: float) -> dict:
    return {"epoch": n, "epochs": 3, "seconds": 0.1, "eval_seconds": 0.0, "examples_per_sec": 1.0, "time": 0.0,
            "loss": 1 - auc, "val_loss": 1 - auc, "val_auc": auc}


def result(epochs: int, auc: float) -> dict:
    return {"final": {"val_auc": auc, "val_loss": 1 - auc}, "test": None, "kept_epoch": epochs, "epochs_run": epochs,
            "steps_per_epoch": 10, "gradient_exchange": "all_reduce", "step_profile": None, "anomaly": None,
            "sample": {"rows": {}, "outputs": []}}


def start(nodes: FakeNodes, node: str = "chief-0") -> None:
    nodes.send(cc.STARTED, node, record={"role": node.split("-")[0], "index": 0, "host": "h", "executor_id": 0,
                                         "pid": 123, "python": "p", "cuda_visible_devices": "",
                                         "partition": 0, "started": 0.0, "cluster": {}, "threads": 1})


def finish(nodes: FakeNodes, epochs: int, auc: float) -> None:
    """The chief's end: its SavedModel handed over (one small file), its result, the run's end."""
    nodes.send(cc.PUT, "chief-0", target=cc.SAVED_MODEL, path="saved_model.pb", offset=0, data=cc.encode_chunk(b"pb"))
    nodes.send(cc.PUBLISH, "chief-0", target=cc.SAVED_MODEL, files={"saved_model.pb": 2})
    nodes.send(cc.RESULT, "chief-0", result=result(epochs, auc))
    nodes.send(cc.DONE, "chief-0", status=cc.RUN_OK)


def lone_trial(aucs: dict[int, list[float]]) -> Script:
    """A single-process trial: its epochs' val_auc from `aucs[trial]`; asks the pruner after each."""

    def play(nodes: FakeNodes, attempt: Attempt) -> None:
        start(nodes)
        values = aucs[trial_of(attempt)]
        for i, auc in enumerate(values, 1):
            nodes.send(cc.PROGRESS, "chief-0", line=epoch(i, auc))
            nodes.send(cc.BEAT, "chief-0", steps=10)
            if nodes.state.handle(cc.SHOULD_PRUNE, {cc.SENDER_NODE: "chief-0", "epoch": i, "metrics": {"val_auc": auc}}):
                nodes.send(cc.DONE, "chief-0", status=cc.RUN_PRUNED)
                return
        finish(nodes, len(values), values[-1])

    return play


def run_sweep(tmp_path: Path, launcher: TrialLauncher, **sweep: object) -> tuple[dict, list[str]]:
    """A two-point grid over the learning rate on the census config, its trials started by `launcher`."""
    root = tmp_path / "dataset"
    dataset_dir = root if (root / "_meta").exists() else tiny_dataset(root)
    base = config.load(CENSUS).with_settings({"train.dataset": str(dataset_dir), "train.reservation_timeout": 5,
                                              "train.step_timeout": 30, "train.max_attempts": 1})
    tables = {"sweep": {"dir": str(tmp_path / "sweep"), "algorithm": "grid", "metric": "val_auc", "goal": "maximize",
                        "max_trials": 2, "max_parallel_trials": 2, "early_stopping": "none", **sweep},
              "params": {"train.learning_rate": {"type": "categorical", "values": [0.01, 0.001]}}}
    lines: list[str] = []
    outcome = sweep_job.run(None, base, space.check_sweep(base, sweep_file.from_tables(tables)).sweep,
                            log=lines.append, launcher=lambda lone: launcher)
    return outcome, lines


def test_every_trial_is_a_training_run_whose_lone_node_the_launcher_starts(tmp_path):
    launcher = TrialLauncher(lone_trial({1: [0.7, 0.8, 0.9], 2: [0.6, 0.65, 0.7]}), lone=True)
    outcome, _ = run_sweep(tmp_path, launcher)
    assert sorted(launcher.launched) == [(1, True), (2, True)]
    rows = {r["trial"]: r for r in outcome["results"]}
    assert {n: (r["status"], r["value"], r["epochs_run"]) for n, r in rows.items()} == {
        1: ("completed", 0.9, 3), 2: ("completed", 0.7, 3)}
    assert outcome["best"]["trial"] == 1
    trial = tmp_path / "sweep" / "trial-001"
    assert json.loads((trial / "result.json").read_text())["status"] == "completed"
    assert (trial / "metrics.json").exists() and not (trial / "backup").exists()


def test_a_lone_node_asks_the_pruner_and_ends_without_a_model(tmp_path):
    launcher = TrialLauncher(lone_trial({1: [0.7, 0.8, 0.9], 2: [0.3, 0.3, 0.3]}), lone=True)
    outcome, _ = run_sweep(tmp_path, launcher, max_parallel_trials=1, early_stopping="median", min_trials=1,
                           warmup_epochs=1)
    rows = {r["trial"]: r for r in outcome["results"]}
    assert rows[1]["status"] == "completed"
    assert (rows[2]["status"], rows[2]["epochs_run"], rows[2]["error"]) == ("pruned", 1, None)
    assert not (tmp_path / "sweep" / "trial-002" / "metrics.json").exists()


def test_the_driver_stops_a_cluster_trial_the_pruner_judges_hopeless(tmp_path):
    stopped: list[int] = []

    def cluster_trial(nodes: FakeNodes, attempt: Attempt) -> None:
        n = trial_of(attempt)
        nodes.register("chief-0", "worker-0")
        start(nodes)
        aucs = [0.7, 0.8, 0.9] if n == 1 else [0.3, 0.3, 0.3]
        patience = 1.0 if n == 1 else 30.0  # trial 2 is hopeless from epoch 1: it waits for the verdict
        # The driver ends the run by cancelling the nodes or, if they report first, by refusing the
        # report: either way the nodes stop, as real ones do.
        try:
            for i, auc in enumerate(aucs, 1):
                nodes.send(cc.PROGRESS, "chief-0", line=epoch(i, auc))
                nodes.send(cc.BEAT, "chief-0", steps=10)
                if nodes.cancelled.wait(patience):
                    stopped.append(n)
                    return
        except RunStopped:
            stopped.append(n)
            return
        finish(nodes, 3, aucs[-1])

    launcher = TrialLauncher(cluster_trial, lone=False)
    outcome, lines = run_sweep(tmp_path, launcher, max_parallel_trials=1, workers_per_trial=2,
                               early_stopping="median", min_trials=1, warmup_epochs=1)
    assert sorted(launcher.launched) == [(1, False), (2, False)]
    rows = {r["trial"]: r for r in outcome["results"]}
    assert rows[1]["status"] == "completed" and rows[2]["status"] == "pruned" and stopped == [2]
    assert rows[2]["epochs_run"] < 3
    assert any("trial 002 pruned after epoch" in line for line in lines)


def test_the_time_budget_stops_running_trials_which_a_resumed_sweep_runs_again(tmp_path):
    holding = threading.Event()

    def holds(nodes: FakeNodes, attempt: Attempt) -> None:
        start(nodes)
        nodes.send(cc.PROGRESS, "chief-0", line=epoch(1, 0.7))
        nodes.send(cc.BEAT, "chief-0", steps=10)
        holding.set()
        nodes.hold()

    outcome, lines = run_sweep(tmp_path, TrialLauncher(holds, lone=True), max_trials=1, max_parallel_trials=1,
                               time_budget_seconds=3)  # time for the trial to start on a loaded machine
    assert holding.is_set()
    assert [r["status"] for r in outcome["results"]] == ["cancelled"]
    assert any("time budget of 3 s used up" in line for line in lines)
    assert not (tmp_path / "sweep" / "trial-001" / "result.json").exists()

    resumed = TrialLauncher(lone_trial({1: [0.7, 0.75, 0.8]}), lone=True)
    outcome, lines = run_sweep(tmp_path, resumed, max_trials=1, max_parallel_trials=1)
    assert resumed.launched == [(1, True)]
    assert [(r["trial"], r["status"], r["value"]) for r in outcome["results"]] == [(1, "completed", 0.8)]


def test_a_trial_whose_node_fails_is_failed_with_the_nodes_traceback(tmp_path):
    def fails(nodes: FakeNodes, attempt: Attempt) -> None:
        start(nodes)
        nodes.send(cc.FAILED, "chief-0", text="Traceback (most recent call last):\n  ...\nValueError: bad layer")
        nodes.hold()

    outcome, _ = run_sweep(tmp_path, TrialLauncher(fails, lone=True), max_trials=1, max_parallel_trials=1)
    [row] = outcome["results"]
    assert row["status"] == "failed" and "ValueError: bad layer" in row["error"]
    assert "ValueError: bad layer" in (tmp_path / "sweep" / "trial-001" / "error.txt").read_text()


def test_by_default_trials_run_on_the_executors_and_only_a_lone_node_asks_the_pruner():
    from tfos_jobs.cluster.driver.node_job import ClusterLauncher

    launchers = sweep_job.default_launcher(None, pruning=True)
    lone, cluster = launchers(True), launchers(False)
    assert isinstance(lone, ClusterLauncher) and isinstance(cluster, ClusterLauncher)
    assert (lone.pruning, cluster.pruning) == (True, False)
    assert sweep_job.default_launcher(None, pruning=False)(True).pruning is False
