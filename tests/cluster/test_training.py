"""Training on a real local-cluster: TFoS nodes on separate executor JVMs, each with its own Python.

Each run is a `tfos train` process, as users run it; the small dataset is prepared once."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tfos_jobs import config
from tfos_jobs.data import synthetic
from tfos_jobs.jobs import prepare
from tfos_jobs.cluster.node.lifecycle import alive
from tfos_jobs.cluster.node import spark_executor
from tfos_jobs import topology

from tests.commands import kill_group, start
from tests.conftest import CENSUS, ROOT, prepared_dataset

BIN = Path(sys.executable).parent
PEOPLE = 12_000
FAST = ["train.epochs=3", "train.batch_size=128", "train.reservation_timeout=60",
        "spark.conf.spark.ui.showConsoleProgress=false"]


@pytest.fixture(scope="module")
def dataset(spark, tmp_path_factory):
    return prepared_dataset(spark, tmp_path_factory.mktemp("train"), PEOPLE, 5.0, 7)


def train(dataset: Path, model_dir: Path, *overrides: str, expect: int = 0, env: dict | None = None):
    sets = [f"train.dataset={dataset}", f"train.model_dir={model_dir}", *FAST, *overrides]
    cmd = [str(BIN / "tfos"), "train", "--config", str(CENSUS), *[a for s in sets for a in ("--set", s)]]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, **(env or {})})
    assert proc.returncode == expect, f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return proc, time.monotonic() - started


def metrics(model_dir: Path) -> dict:
    return json.loads((model_dir / "metrics.json").read_text())


def assert_exported_model_matches_trained(model_dir: Path) -> None:
    import tensorflow as tf

    sample = json.loads((model_dir / "sample_predictions.json").read_text())
    fn = tf.saved_model.load(str(model_dir / "saved_model")).signatures["serving_default"]
    args = fn.structured_input_signature[1]  # strings, numbers, lists of strings padded as the model takes them
    assert sorted(sample["rows"]) == sorted(args)
    inputs = {k: tf.constant(v, dtype=args[k].dtype) for k, v in sample["rows"].items()}
    got = fn(**inputs)["probability"].numpy()
    np.testing.assert_allclose(got, np.asarray(sample["outputs"]).reshape(-1), atol=1e-6)


def assert_no_node_process_left(m: dict) -> None:
    pids = [n["pid"] for n in m["nodes"]]
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.5)
    assert not [p for p in pids if alive(p)], "TF node processes outlived the run"


@pytest.fixture(scope="module")
def mwms(dataset, tmp_path_factory):
    root = tmp_path_factory.mktemp("mwms")
    executor_tmp = root / "executor-tmp"  # the executors' temporary directory
    executor_tmp.mkdir()
    proc, _ = train(dataset, root / "model", "spark.master=local-cluster[2,1,1536]",
                    f"spark.conf.spark.executorEnv.TMPDIR={executor_tmp}")
    return root / "model", proc, executor_tmp


def test_multi_worker_mirrored_learns_and_exports(mwms):
    model_dir, proc, executor_tmp = mwms
    m = metrics(model_dir)
    assert [n["role"] for n in m["nodes"]] == ["chief", "worker"]
    executors = {n["executor_id"] for n in m["nodes"]}  # Spark's executor IDs, as its UI shows them
    assert len(executors) == 2 and spark_executor.DRIVER not in executors, executors
    assert m["gradient_exchange"] == topology.MESH  # auto, with two workers
    assert m["epochs"] == 3 and len(m["history"]) == 3
    assert 0 < m["startup"]["to_reserved_seconds"] < m["startup"]["to_first_step_seconds"] < m["seconds"]
    assert m["eval"]["auc"] > 0.8  # the base rate gives 0.5
    assert "epoch   3/3 [" in proc.stdout and "val_auc" in proc.stdout
    assert (model_dir / "learning_curve.png").stat().st_size > 10_000
    assert (model_dir / "saved_model" / "assets" / "feature_spec.json").exists()
    assert list((model_dir / "logs").glob("**/events.out.tfevents.*"))
    assert not (model_dir / "_run").exists()
    assert not list(model_dir.glob("saved_model.tmp*"))
    assert_exported_model_matches_trained(model_dir)
    assert_no_node_process_left(m)
    # The nodes' workspaces are gone, and with them TensorFlow's autograph sources (a Spark Python
    # worker never exits the way that would delete them).
    left = [p.name for p in executor_tmp.iterdir()]
    assert not [n for n in left if n.startswith(("tfos-", "__autograph_generated_file"))], left


@pytest.fixture(scope="module")
def demo_dataset(spark, tmp_path_factory):
    """The demo's data: the census generator and prepare settings of conf/census.toml, only
    the paths moved."""
    demo = config.load(CENSUS)
    root = tmp_path_factory.mktemp("demo")
    raw, out = root / "raw", root / "dataset"
    syn = demo.synthetic
    synthetic.generate(spark, str(raw), syn.people, syn.events_per_person, syn.seed, syn.as_of)
    paths = [f"sources.{name}.path={raw}/{name}" for name in ("people", "regions", "events")]
    prepare.run(spark, config.load(CENSUS, ["spark.master=local[2]", f"prepare.output={out}", *paths]))
    return out


@pytest.mark.slow  # three 5-epoch trainings on the demo's 100,000 people, about 2.5 minutes: `make test-all`
def test_distributed_training_learns_what_one_process_learns(demo_dataset, tmp_path):
    """The demo's training settings under each strategy: two multi_worker_mirrored workers and a
    parameter-server cluster (2 workers, 1 ps) reach the local strategy's eval AUC within 0.01,
    and two workers train as two TF nodes."""
    runs = {"local": ["spark.master=local[1]", "train.strategy=local"],
            "mwms": ["spark.master=local-cluster[2,1,1536]"],
            "ps": ["spark.master=local-cluster[4,1,1536]", "train.strategy=parameter_server", "train.workers=2",
                   "train.ps=1"]}
    m = {}
    for name, sets in runs.items():
        model_dir = tmp_path / name
        sets = [f"train.dataset={demo_dataset}", f"train.model_dir={model_dir}", "train.reservation_timeout=90",
                "spark.conf.spark.ui.showConsoleProgress=false", *sets]
        cmd = [str(BIN / "tfos"), "train", "--config", str(CENSUS), *[a for s in sets for a in ("--set", s)]]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                              env={**os.environ, "PYSPARK_PYTHON": sys.executable})
        assert proc.returncode == 0, f"{name}: {proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
        m[name] = metrics(model_dir)
        assert_exported_model_matches_trained(model_dir)
    auc = {name: r["eval"]["auc"] for name, r in m.items()}
    assert auc["mwms"] >= 0.91, auc  # what `make demo` trains and prints
    assert abs(auc["mwms"] - auc["local"]) <= 0.01, auc
    assert abs(auc["ps"] - auc["local"]) <= 0.01, auc
    assert [n["role"] for n in m["mwms"]["nodes"]] == ["chief", "worker"]
    assert len({n["executor_id"] for n in m["mwms"]["nodes"]}) == 2
    assert [(n["role"], n["index"]) for n in m["ps"]["nodes"]] == [("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1)]
    assert_no_node_process_left(m["ps"])


@pytest.mark.slow  # a three-node parameter-server cluster, about 40 s: `make test-all`
def test_gpu_addresses_go_to_workers_only(dataset, tmp_path):
    """Spark assigns GPU addresses (from a fake discovery script) per task; workers see only
    their own, the parameter server none."""
    gpu_dir = tmp_path / "gpus"
    gpu_dir.mkdir()
    script = ROOT / "tests" / "cluster" / "fake_gpu_discovery.sh"
    model_dir = tmp_path / "model"
    train(dataset, model_dir, "spark.master=local-cluster[3,1,1536]", "train.strategy=parameter_server",
          "train.workers=1", "train.ps=1", "train.gpus_per_worker=2", f"train.gpu_discovery_script={script}",
          "train.epochs=1", "train.steps_per_epoch=5", env={"TFOS_FAKE_GPU_DIR": str(gpu_dir)})
    nodes = {n["role"]: n["cuda_visible_devices"] for n in metrics(model_dir)["nodes"]}
    assert nodes["ps"] == ""
    chief, worker = nodes["chief"].split(","), nodes["worker"].split(",")
    assert len(chief) == len(worker) == 2
    assert not set(chief) & set(worker)


@pytest.mark.slow  # 1.2 GB written, then streamed to two TF nodes, about a minute each: `make test-all`
@pytest.mark.parametrize("delivery", ["spool", "chunks"])
def test_files_larger_than_an_executors_heap_reach_their_nodes(dataset, tmp_path, delivery):
    """A train split of two files of 600 MB each, more than an executor's whole heap (512 MB): each
    node gets its file (the jar's tfos-node-inputs source, either delivery) and trains from it."""
    from benchmarks.stages.node_inputs import concatenated

    big = concatenated(str(dataset), str(tmp_path / "big"), 600 * 2**20, 2)
    sizes = [p.stat().st_size for p in (tmp_path / "big" / "train").iterdir()]
    assert len(sizes) == 2 and min(sizes) >= 600 * 2**20
    model_dir = tmp_path / "model"
    train(Path(big), model_dir, "spark.master=local-cluster[2,1,512]", "spark.conf.spark.executor.memory=512m",
          "train.epochs=1", "train.steps_per_epoch=20",
          "train.in_memory_mb=64", f"train.node_inputs={delivery}", env={"PYTHONPATH": str(ROOT)})
    m = metrics(model_dir)
    assert m["epochs"] == 1 and sorted(n["role"] for n in m["nodes"]) == ["chief", "worker"]
    assert (model_dir / "saved_model" / "saved_model.pb").exists()


@pytest.mark.slow  # waits out a reservation timeout, about 30 s: `make test-all`
def test_too_few_executors_fails_clearly_within_the_timeout(dataset, tmp_path):
    proc, _ = train(dataset, tmp_path / "model", "spark.master=local-cluster[2,1,1024]", "train.workers=3",
                    "train.reservation_timeout=10", expect=2)
    assert "the TF cluster needs 3 executors (3 workers, one of them the chief), but only 2 registered" in proc.stderr
    assert "train.reservation_timeout = 10 s" in proc.stderr  # it gave up at the timeout, not at the test's


def test_exception_in_training_reaches_the_driver_and_nothing_is_left(dataset, tmp_path):
    model_dir = tmp_path / "model"
    # passes the driver's dry build, raises on the nodes; the executors import it from the package's shipment
    proc, _ = train(dataset, model_dir, "spark.master=local-cluster[2,1,1536]",
                    "train.model.kind=tests.cluster.boom:build_on_nodes", expect=2, env={"PYTHONPATH": str(ROOT)})
    # whichever node fails first is reported, with its own error, once: no traceback in the console
    failed = re.findall(r"TF node (?:chief|worker)-0 failed: ValueError: boom: this model function always fails",
                        proc.stderr)
    assert failed and proc.stderr.count("boom: this model function always fails") == len(failed), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (model_dir / "saved_model").exists()
    runs = list((model_dir / "_run").iterdir())
    nodes = [json.loads(p.read_text()) for p in runs[0].glob("nodes/*.json")]
    assert len(nodes) == 2
    assert_no_node_process_left({"nodes": nodes})


@pytest.mark.slow  # two workers, about a minute: `make test-all` (tests/unit/test_own_compile.py: `make test`)
def test_a_model_its_function_compiled_keeps_its_loss_metrics_and_optimizer(dataset, tmp_path):
    model_dir = tmp_path / "model"
    proc, _ = train(dataset, model_dir, "spark.master=local-cluster[2,1,1536]", "train.model.kind=mymodels:build_focal",
                    "train.learning_rate=0.5", env={"PYTHONPATH": str(ROOT / "examples")})
    assert ("train.model.kind: mymodels:build_focal compiles its model itself: loss focal; metrics auc, precision, "
            "recall; optimizer Adam (learning rate 0.002) (train.optimizer and train.learning_rate are not used)"
            ) in proc.stdout
    m = metrics(model_dir)
    assert [n["role"] for n in m["nodes"]] == ["chief", "worker"]
    assert {"precision", "recall", "val_precision", "val_recall"} <= set(m["history"][-1])
    assert re.search(r"epoch   3/3 \[#+\] loss \S+  auc \S+  val_loss \S+  val_auc \S+  precision \S+  recall \S+  "
                     r"val_precision \S+  val_recall \S+", proc.stdout), proc.stdout[-2000:]
    # the focal loss, not the cross-entropy the task would compile: at this AUC the latter is above 0.3
    assert m["eval"]["auc"] > 0.8 and m["eval"]["loss"] < 0.15, m["eval"]
    assert_exported_model_matches_trained(model_dir)


@pytest.mark.slow  # a training on two workers, about a minute: `make test-all`
def test_a_model_with_its_own_train_step_trains_with_it(dataset, tmp_path):
    model_dir = tmp_path / "model"
    proc, _ = train(dataset, model_dir, "spark.master=local-cluster[2,1,1536]", "train.model.kind=mymodels:build_clipped",
                    "train.model.params.clip_norm=0.5", env={"PYTHONPATH": str(ROOT / "examples")})
    m = metrics(model_dir)
    # the step's own log, on every epoch: the gradients' global norm before clipping
    assert all(e["grad_norm"] > 0 for e in m["history"]) and "grad_norm" in proc.stdout
    assert m["gradient_exchange"] == topology.ALL_REDUCE  # its step applies gradients the strategy's own way
    assert m["eval"]["auc"] > 0.8
    assert_exported_model_matches_trained(model_dir)


def test_local_strategy_trains_in_the_driver(spark, dataset, tmp_path):
    from tfos_jobs.jobs.train.driver import job as train_driver

    cfg = config.load(CENSUS, [f"train.dataset={dataset}", f"train.model_dir={tmp_path / 'model'}",
                               "train.strategy=local", "train.epochs=2", "train.batch_size=128"])
    lines: list[str] = []
    m = train_driver.run(spark, cfg, log=lines.append)
    assert m["eval"]["auc"] > 0.8
    assert sum(line.startswith("epoch ") for line in lines) == 2
    assert_exported_model_matches_trained(tmp_path / "model")


def checkpoint_position(backup: Path) -> tuple[int, int] | None:
    """(epoch, step) after which the run's published resume state was written, or None; where
    a publication is between its renames (or was killed there), the state moved aside."""
    from tfos_jobs.cluster.node.checkpoints import saved_at

    for place in (backup, *sorted(backup.parent.glob(f"{backup.name}.old-*"))):
        saved = saved_at(str(place))
        if saved is not None:
            return saved
    return None


def published_position(backup: Path) -> tuple[int, int] | None:
    """`checkpoint_position` while the driver may be publishing: None when the read raced it."""
    try:
        return checkpoint_position(backup)
    except Exception:  # a publication moved the files as they were read
        return None


@pytest.mark.slow  # three training runs, about a minute: run by `make test-all`
def test_a_run_killed_mid_epoch_resumes_at_its_last_step_checkpoint_and_learns_the_same_model(dataset, tmp_path):
    """A `tfos train` killed in its second epoch, just after a step checkpoint, then run again:
    it resumes at that step with the batches an unbroken run would have had there, so the last
    epoch's metrics equal an unbroken run's."""
    steps = 200
    sets = ["train.strategy=local", "train.steps_per_epoch=200", "train.batch_size=64", "train.checkpoint_steps=40",
            "train.model.dropout=0", "train.score_test=false", "train.tensorboard=false"]
    train(dataset, tmp_path / "whole", *sets)
    whole = metrics(tmp_path / "whole")
    assert whole["checkpoint_steps"] == 40 and whole["resumed_at_steps"] == 0

    cut = tmp_path / "cut"
    proc = start([str(BIN / "tfos"), "train", "--config", str(CENSUS), *[
        a for s in [f"train.dataset={dataset}", f"train.model_dir={cut}", *FAST, *sets] for a in ("--set", s)]])
    position, deadline = None, time.monotonic() + 600
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            position = published_position(cut / "backup")
            if position is not None and position[0] == 1 and 0 <= position[1] < steps - 1:  # in the second epoch
                break
            time.sleep(0.05)
    finally:
        kill_group(proc)
    assert position is not None and position[0] == 1, f"never saw a checkpoint in epoch 2: {position}"
    resumed = checkpoint_position(cut / "backup")  # the newest published, maybe one after `position`
    assert resumed is not None and resumed[0] == 1 and resumed[1] < steps - 1, resumed

    rerun, _ = train(dataset, cut, *sets)
    m = metrics(cut)
    assert f"resuming the unfinished run in file:{cut} from its last checkpoint" in rerun.stdout
    assert m["resumed_at_steps"] == steps + resumed[1] + 1 and m["attempts"] == 1
    assert [e["epoch"] for e in m["history"]] == [1, 2, 3]
    last, expected = m["final"], whole["final"]  # the last epoch's, as Keras reported them
    assert sorted(last) == sorted(expected) and "val_auc" in last
    for name, value in expected.items():
        assert last[name] == pytest.approx(value, rel=1e-4, abs=1e-6), name


def test_training_refuses_an_unprepared_dataset_and_a_trained_model_dir(spark, dataset, tmp_path):
    from tfos_jobs.jobs.train.driver import job as train_driver
    from tfos_jobs.errors import InputError, OutputExistsError

    cfg = config.load(CENSUS, [f"train.dataset={tmp_path}", "train.strategy=local"])
    with pytest.raises(InputError, match="_meta/manifest.json is missing"):
        train_driver.run(spark, cfg)
    (tmp_path / "model" / "saved_model").mkdir(parents=True)
    cfg = config.load(CENSUS, [f"train.dataset={dataset}", f"train.model_dir={tmp_path / 'model'}", "train.strategy=local"])
    with pytest.raises(OutputExistsError, match="holds a trained model; pass --overwrite"):
        train_driver.run(spark, cfg)


def test_a_model_function_that_cannot_be_imported_is_a_config_error(spark, dataset, tmp_path):
    from tfos_jobs.jobs.train.driver import job as train_driver
    from tfos_jobs.errors import ConfigError

    cfg = config.load(CENSUS, [f"train.dataset={dataset}", f"train.model_dir={tmp_path}", "train.model.kind=nope:build"])
    with pytest.raises(ConfigError, match="train.model.kind: cannot import module 'nope'"):
        train_driver.run(spark, cfg)
