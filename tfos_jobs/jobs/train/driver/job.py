"""The train job (driver side): the model directory, the attempts, the report.

Each attempt trains either in this process (`local`) or on TF nodes started on the executors (a TF cluster, or a sweep
trial's lone node), through the launcher seam of `tfos_jobs.cluster.driver.launcher`. A cluster failure that a relaunch
can fix (a lost executor, a hang) starts a new attempt, which resumes from the last checkpoint; anything else fails the
job with the failing node's own message.

The dataset and the model directory may be on any filesystem the session reaches (local,
HDFS, S3, ...): the driver reads and writes them through `storage.Storage`, the nodes get the
dataset through Spark and hand back what they produce over the control channel.
"""
from __future__ import annotations

import json
import tempfile
import threading
import time
from typing import Callable

from pyspark.sql import SparkSession

from tfos_jobs import control_channel as cc
from tfos_jobs import user_code
from tfos_jobs.cluster.driver import node_inputs
from tfos_jobs.cluster.driver.launcher import Attempt, Launcher, Watch, run_attempts
from tfos_jobs.cluster.driver.local import LocalLauncher
from tfos_jobs.cluster.driver.node_job import ClusterLauncher
from tfos_jobs.cluster.driver.run_state import Judge, RunState, new_run_id
from tfos_jobs.cluster.driver.transfers import Transfers, model_dir_targets
from tfos_jobs.config import Config, TrainConfig
from tfos_jobs.contracts.dataset import Split
from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.contracts.metrics import Metrics, MetricsExtras, ModelSummary, control_report, node_summary
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.contracts.node_args import STOPPING_METRIC, NodeArgs
from tfos_jobs.errors import ConfigError, OutputExistsError, Pruned, TrainingError
from tfos_jobs.jobs.train.driver.progress import ProgressPrinter, format_breakdown, plot_learning_curve, step_breakdown
from tfos_jobs.data.dataset import DatasetMeta
from tfos_jobs.model import train_function
from tfos_jobs.model.builder import CheckedBuild, resolve_build
from tfos_jobs.model.train_function import CheckedFunction
from tfos_jobs.progress_log import ProgressLog
from tfos_jobs.storage import Storage, named, restore_aside
from tfos_jobs.topology import Strategy
from tfos_jobs.worker_python import check_worker_python

__all__ = ["run", "TrainingError"]


def run(spark: SparkSession | None, config: Config | TrainConfig, *, overwrite: bool = False,
        log: Callable[[str], None] = print, stop: threading.Event | None = None, progress: ProgressLog | None = None,
        on_epoch: Callable[[EpochLine], None] | None = None, model: CheckedBuild | None = None,
        meta: DatasetMeta | None = None, launcher: Launcher | None = None, judge: Judge | None = None,
        model_dir: ModelDir | None = None, fn: CheckedFunction | None = None) -> Metrics:
    """Train as configured; returns the metrics written to `<model_dir>/metrics.json`.

    Setting `stop` ends a run early (a sweep's time budget or pruner): it fails with `TrainingError` and keeps its
    backup, so running it again resumes. `progress`: the epoch log to keep (a sweep watches its trials' as they train);
    by default the model directory's. `on_epoch` gets each epoch's line once, on this thread, as it is printed. Only the
    `[train]` section is used: a `TrainConfig` will do. `model`: the model already checked on the driver
    (`model.builder.check_build`; its callable, if it has one, reaches the nodes pickled by value), else
    `train.model.kind` is imported here; `meta`: the dataset's, already read; `model_dir`: `model_directory`'s, when the
    caller needed it first. `launcher`: where the nodes run (default: this process for `local`, else the executors);
    `judge` answers a lone node that asks whether to go on after an epoch (a sweep's pruner): a run it stops raises
    `Pruned`. `fn`: a training function of the user's (`train.fn`) already checked, which trains in place of the
    package's build and fit (its callable, if it has one, reaches the nodes pickled by value); without it a `train.fn`
    is checked here."""
    train = config if isinstance(config, TrainConfig) else config.train
    storage = Storage(spark)
    meta = meta or node_inputs.read_dataset(storage, "train.dataset", train.dataset)
    if train.fn and fn is None:
        fn = train_function.check(train.fn)
    if fn is None and model is None:
        try:
            resolve_build(train.model.kind)  # a user model function must import here before nodes start
        except ValueError as e:
            raise ConfigError(str(e)) from None
    model_fn = model.by_value if model is not None and fn is None else None
    train_fn = fn.by_value if fn is not None else None
    if spark is not None and fn is None and model_fn is None:  # a callable travels pickled in the node args
        user_code.ship(spark, [train.model.kind], log)  # a module the executors cannot import themselves
    if spark is not None and fn is not None and train_fn is None:
        user_code.ship(spark, [fn.name], log)
    model_dir = model_dir or model_directory(storage, train)
    storage.check_writable("train.model_dir", model_dir.path)
    if launcher is None:
        launcher = LocalLauncher(storage) if train.strategy == Strategy.LOCAL else ClusterLauncher(spark)
    launcher.check(train, log)
    if isinstance(launcher, ClusterLauncher):  # the nodes' Python imports this package, or a clear error now
        check_worker_python(launcher.spark)
    resuming = _prepare_model_dir(storage, model_dir, overwrite or train.overwrite)
    progress = progress or ProgressLog(storage, model_dir.progress, resume=resuming)
    if resuming:
        done = len(progress.lines())
        kept = f": epochs 1-{done} are not trained again" if done else ""
        log(f"resuming the unfinished run in {model_dir.path} from its last checkpoint{kept}")
    by = f" with the training function {fn.name}" if fn is not None else ""
    log(f"training {train.strategy}{by} on {meta.records(Split.TRAIN):,} records "
        f"({train.epochs} epochs, batch {train.batch_size}) into {model_dir.path}")
    started = time.time()
    printer = ProgressPrinter(progress, log, on_epoch)
    transfers = Transfers(storage, model_dir_targets(model_dir))
    args = NodeArgs.from_train_config(train, dataset=meta.root, model_fn=model_fn, train_fn=train_fn)
    watch = Watch(log=printer.log, poll=printer.poll, stop=stop)

    def attempt(number: int, workers: int | None) -> Attempt:
        """Attempt `number`, with `workers` workers when elastic training resized the cluster."""
        sized = train.resized(workers or train.workers)
        sized_args = args if sized is train else NodeArgs.from_train_config(sized, dataset=meta.root, model_fn=model_fn,
                                                                             train_fn=train_fn)
        run_id = new_run_id()
        state = RunState(run_id, sized.nodes(), progress, transfers, keep=_keeper(storage, model_dir, run_id),
                         judge=judge, lone=train.strategy == Strategy.LOCAL)
        return Attempt(number, sized, sized_args, meta, state, model_dir.error_file, workers_wanted=train.workers)

    try:
        finished = run_attempts(launcher, max_attempts=train.max_attempts, attempt=attempt, watch=watch)
    finally:
        transfers.close()
    printer.poll()
    return _finish(storage, model_dir, finished, progress, time.time() - started, log, watch)


def model_directory(storage: Storage, train: TrainConfig) -> ModelDir:
    """`train.model_dir`, qualified: the one place it is (an error names the setting)."""
    with named("train.model_dir", train.model_dir):
        return ModelDir(storage.qualify(train.model_dir))


def _prepare_model_dir(storage: Storage, model_dir: ModelDir, overwrite: bool) -> bool:
    """A trained model is kept unless --overwrite; an interrupted run is resumed from its
    backup (the progress log goes on; returns True), anything else left behind is cleared. A
    backup whose publication was killed between its renames is put back in place first."""
    restore_aside(storage, model_dir.backup)
    if storage.exists(model_dir.saved_model) or storage.exists(model_dir.metrics):
        if not overwrite:
            raise OutputExistsError(f"model directory {model_dir.path!r} holds a trained model; "
                                    "pass --overwrite to replace it")
        storage.delete(model_dir.path)
    elif storage.tree(model_dir.backup):
        return True
    else:
        storage.delete(model_dir.progress)
    storage.makedirs(model_dir.path)
    return False


def _keeper(storage: Storage, model_dir: ModelDir, run_id: str) -> Callable[[str, str, str], None]:
    """Writes what the nodes of attempt `run_id` report about themselves into the model directory."""

    def keep(kind: str, node: str, text: str) -> None:
        path = model_dir.node_record(run_id, node) if kind == cc.STARTED else model_dir.error_file(run_id, node)
        try:
            storage.write_text(path, text)
        except Exception:  # the run goes on; the driver still holds it in memory
            pass

    return keep


def _finish(storage: Storage, model_dir: ModelDir, finished: Attempt, progress: ProgressLog, seconds: float,
            log: Callable[[str], None], watch: Watch) -> Metrics:
    train, state, attempts = finished.train, finished.state, finished.number
    epochs = progress.lines()
    if state.done() == cc.RUN_PRUNED:
        raise Pruned(f"stopped by the sweep's pruner after epoch {len(epochs)}")
    result = state.result()
    if result is None:
        raise TrainingError("the chief ended without reporting its result (see the executor logs)")
    evaluation = {k.removeprefix("val_"): v for k, v in result["final"].items() if k.startswith("val_")}
    test, anomaly = result["test"], result["anomaly"]  # a held-out split, scored once; an autoencoder's threshold
    extras = MetricsExtras(test=test) if test else MetricsExtras()
    if anomaly:
        extras = MetricsExtras(**extras, anomaly=anomaly)
    metrics = Metrics(
        strategy=train.strategy, nodes=[node_summary(r) for r in state.records().values()], attempts=attempts,
        checkpoint_steps=train.checkpoint_interval(), recoveries=list(watch.recoveries),
        resumed_at_steps=watch.resumed_at or 0, epochs=max((e.epoch for e in epochs), default=result["epochs_run"]),
        steps_per_epoch=result["steps_per_epoch"], gradient_exchange=result["gradient_exchange"],
        seconds=round(seconds, 1), startup=state.startup(), final=result["final"], lost_nodes=state.lost(),
        replaced_nodes=state.replaced(), control=control_report(watch.rejected),
        step_profile=step_breakdown(epochs, result["step_profile"], result["steps_per_epoch"],
                                    train.workers if train.strategy == Strategy.PARAMETER_SERVER else 1),
        eval=evaluation, kept_epoch=result["kept_epoch"], history=[e.to_json() for e in epochs],
        saved_model=model_dir.saved_model, model=ModelSummary(kind=train.fn or train.model.kind, params=dict(train.model.params)),
        **extras)
    storage.write_text(model_dir.metrics, json.dumps(metrics, indent=2))
    storage.write_text(model_dir.sample_predictions, json.dumps(result["sample"]))  # outputs on a few eval rows
    if epochs:
        with tempfile.TemporaryDirectory(prefix="tfos-plot-") as tmp:
            plot_learning_curve(epochs, f"{tmp}/curve.png", f"{train.strategy}, {len(epochs)} epochs")
            storage.upload_file(f"{tmp}/curve.png", model_dir.learning_curve)
    storage.delete(model_dir.runs)  # failed attempts' tracebacks
    storage.delete(model_dir.backup)  # training ended well: nothing to resume
    shown = "  ".join(f"{k} {v:.4f}" for k, v in evaluation.items())
    kept = metrics["kept_epoch"]
    restored = f" (the model of epoch {kept}, the lowest {STOPPING_METRIC})" if kept and kept < metrics["epochs"] else ""
    log(f"trained in {seconds:.1f} s; eval: {shown}{restored}")
    if test:
        log("test (held out): " + "  ".join(f"{k} {v:.4f}" for k, v in test.items()))
    if metrics["step_profile"]:
        log(format_breakdown(metrics["step_profile"]))
    log(f"saved model: {metrics['saved_model']}")
    return metrics
