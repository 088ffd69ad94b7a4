"""The train job (driver side): the model directory, the attempts, the report.

Each attempt trains either in this process (`local`) or on a TF cluster started on the
executors (`driver.tf_cluster`). A cluster failure that a relaunch can fix (a lost executor,
a hang) starts a new attempt, which resumes from the last finished epoch; anything else
fails the job with the failing node's own message.
"""
from __future__ import annotations

import os
import shutil
import threading
import time
from collections import Counter
from typing import Any, Callable

from pyspark.sql import SparkSession

from tfos_jobs.config import Config, TrainConfig
from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.contracts.run_dir import LAUNCHED, ModelDir, RunDir, write_json
from tfos_jobs.data import meta as meta_mod
from tfos_jobs.driver.progress import (ProgressPrinter, format_breakdown, plot_learning_curve, read_progress,
                                       step_breakdown)
from tfos_jobs.driver.tf_cluster import run_cluster, startup
from tfos_jobs.errors import ConfigError, OutputExistsError, TrainingError
from tfos_jobs.model import exchange
from tfos_jobs.model.builder import resolve_model_fn

__all__ = ["run", "TrainingError"]

POLL = 0.5


def run(spark: SparkSession, config: Config, *, overwrite: bool = False,
        log: Callable[[str], None] = print, stop: threading.Event | None = None) -> dict[str, Any]:
    """Train as configured; returns the metrics written to `<model_dir>/metrics.json`.

    Setting `stop` ends a TF cluster run early (a sweep's time budget): it fails with
    `TrainingError` and keeps its backup, so running it again resumes."""
    tr = config.train
    meta = meta_mod.read(tr.dataset)  # refuses a directory without _meta/manifest.json
    try:
        resolve_model_fn(tr.model.kind)  # a user model function must import here before nodes start
    except ValueError as e:
        raise ConfigError(str(e)) from None
    model_dir = ModelDir(os.path.abspath(tr.model_dir))
    _prepare_model_dir(model_dir, overwrite or tr.overwrite, log)
    log(f"training {tr.strategy} on {meta.manifest['splits']['train']['records']:,} records "
        f"({tr.epochs} epochs, batch {tr.batch_size}) into {model_dir.path}")
    started = time.time()
    printer = ProgressPrinter(model_dir.progress, log)
    rejected: Counter = Counter()
    for attempt in range(1, tr.max_attempts + 1):
        run_dir = model_dir.new_run()
        args = NodeArgs.from_train_config(tr, dataset=os.path.abspath(tr.dataset), model_dir=model_dir.path,
                                          run_dir=run_dir.path)
        try:
            if tr.strategy == "local":
                _run_local(args, run_dir, printer)
            else:
                run_cluster(spark.sparkContext, tr, args, run_dir, printer.log, printer.poll, rejected, stop)
            break
        except TrainingError as e:
            if not e.retriable or attempt == tr.max_attempts:
                raise
            log(f"attempt {attempt} of {tr.max_attempts} failed: {e}\nrelaunching the TF cluster; "
                "training resumes from the last finished epoch")
    printer.poll()
    return _finish(model_dir, run_dir, tr, attempt, time.time() - started, log, rejected)


def _prepare_model_dir(model_dir: ModelDir, overwrite: bool, log: Callable[[str], None]) -> None:
    """A trained model is kept unless --overwrite; an interrupted run is resumed from its
    backup (the progress log goes on), anything else left behind is cleared."""
    if os.path.exists(model_dir.saved_model) or os.path.exists(model_dir.metrics):
        if not overwrite:
            raise OutputExistsError(f"model directory {model_dir.path!r} holds a trained model; "
                                    "pass --overwrite to replace it")
        shutil.rmtree(model_dir.path)
    elif model_dir.has_backup():
        log(f"resuming the unfinished run in {model_dir.path} from its last finished epoch")
    elif os.path.exists(model_dir.progress):
        os.remove(model_dir.progress)
    os.makedirs(model_dir.path, exist_ok=True)


def _run_local(args: NodeArgs, run: RunDir, printer: ProgressPrinter) -> None:
    """One process, no TF cluster: in a thread, so progress prints as it goes."""
    from tfos_jobs.executor import training

    failure: list[BaseException] = []
    run.mark_time(LAUNCHED)

    def target():
        try:
            if args.threads:
                training.configure_threads(args.threads)
            training.fit_and_export(args, role="chief", worker_index=0, num_workers=1)
        except BaseException as e:  # reported below, in the caller's thread
            failure.append(e)

    thread = threading.Thread(target=target, name="tfos-local-train")
    thread.start()
    while thread.is_alive():
        printer.poll()
        thread.join(POLL)
    if failure:
        e = failure[0]
        raise TrainingError(f"local training failed: {type(e).__name__}: {e}") from e


def _finish(model_dir: ModelDir, run: RunDir, tr: TrainConfig, attempts: int, seconds: float,
            log: Callable[[str], None], rejected: Counter) -> dict[str, Any]:
    epochs = read_progress(model_dir.progress)
    result = run.read_result()
    nodes = [{k: node[k] for k in ("role", "index", "executor_id", "cuda_visible_devices", "pid", "manager_pid")}
             for node in run.node_records().values()]
    metrics = {
        "strategy": tr.strategy, "nodes": nodes, "attempts": attempts,
        "epochs": max((e["epoch"] for e in epochs), default=result["epochs_run"]),
        "steps_per_epoch": result["steps_per_epoch"],
        "gradient_exchange": result.get("gradient_exchange", exchange.ALL_REDUCE),
        "seconds": round(seconds, 1), "startup": startup(run), "final": result["final"],
        "lost_nodes": run.lost_nodes(),
        "control": {"rejected_messages": sum(rejected.values()), "rejected_from": sorted(rejected)},
        "step_profile": step_breakdown(epochs, result.get("step_profile"), result["steps_per_epoch"],
                                       tr.workers if tr.strategy == "parameter_server" else 1),
        "eval": {k.removeprefix("val_"): v for k, v in result["final"].items() if k.startswith("val_")},
        "history": epochs,
        "saved_model": model_dir.saved_model,
    }
    if result.get("anomaly"):  # an autoencoder: the threshold above which a window is an anomaly
        metrics["anomaly"] = result["anomaly"]
    write_json(model_dir.metrics, metrics, indent=2)
    write_json(model_dir.sample_predictions, result["sample"])  # the trained model's outputs on a few eval rows
    if epochs:
        plot_learning_curve(epochs, model_dir.learning_curve, f"{tr.strategy}, {len(epochs)} epochs")
    shutil.rmtree(model_dir.runs, ignore_errors=True)  # this run's records and failed attempts'
    if os.path.isdir(model_dir.backup) and not os.listdir(model_dir.backup):
        os.rmdir(model_dir.backup)  # BackupAndRestore empties it when training ends well
    shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics["eval"].items())
    log(f"trained in {seconds:.1f} s; eval: {shown}")
    if metrics["step_profile"]:
        log(format_breakdown(metrics["step_profile"]))
    log(f"saved model: {metrics['saved_model']}")
    return metrics
