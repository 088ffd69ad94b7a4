"""What a finished training leaves in its MLflow run: figures, plots, the feature spec, the
model as an MLflow model, and (when asked) a new registered version."""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Mapping

from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts.dataset import Split
from tfos_jobs.contracts.metrics import FAILURE
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.storage import Storage
from tfos_jobs.tracking import mlflow_model, registry
from tfos_jobs.tracking.run_logger import TrackedRun

CONFIG_ARTIFACT = "config.json"


def local_copy(storage: Storage, path: str, workdir: str, name: str) -> str | None:
    """`path` on this host's disk: itself when local, else downloaded into `workdir`; None if absent."""
    if not storage.exists(path):
        return None
    local = storage.on_this_host(path)
    if local is not None:
        return local
    target = os.path.join(workdir, name)
    storage.download(path, target)
    return target


def summary_metrics(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The final figures of a training's metrics.json: eval_<metric>, test_<metric> (a held-out split), seconds, epochs,
    attempts, and what its relaunches cost (steps trained again, seconds without a step, nodes started on a new task;
    elastic training's resizes and the fewest workers a resized relaunch trained with)."""
    out = {f"{split}_{k}": v for split in (Split.EVAL.value, Split.TEST.value)
           for k, v in (metrics.get(split) or {}).items() if isinstance(v, (int, float))}
    out.update({"train_seconds": metrics.get("seconds", 0.0), "epochs": metrics.get("epochs", 0),
                "attempts": metrics.get("attempts", 1)})
    recoveries = metrics.get("recoveries") or []
    if recoveries:
        out["steps_trained_again"] = sum(r["trained_again"] for r in recoveries)
        out["seconds_without_steps"] = sum(r["seconds_without_steps"] for r in recoveries)
        out["nodes_restarted"] = sum(len(r.get("nodes_restarted", [])) for r in recoveries)
        resized = [r for r in recoveries if r.get("cause", FAILURE) != FAILURE]
        if resized:  # elastic training
            out["resizes"] = len(resized)
            out["min_workers_trained"] = min(r["workers"] for r in resized)
    threshold = (metrics.get("anomaly") or {}).get("threshold")
    if isinstance(threshold, (int, float)):
        out["anomaly_threshold"] = threshold
    return out


def log_training(run: TrackedRun, storage: Storage, model_dir: ModelDir, metrics: Mapping[str, Any], workdir: str,
                 register: str = "", alias: str = "", log: Callable[[str], None] = print) -> None:
    """Everything a model directory holds that a reader of the run wants, and the model."""
    run.metrics(summary_metrics(metrics))
    metrics_file = os.path.join(workdir, "metrics.json")
    with open(metrics_file, "w", encoding="utf-8") as fh:
        json.dump(metrics, fh, indent=2, default=str)
    run.artifact(metrics_file)
    curve = local_copy(storage, model_dir.learning_curve, workdir, "learning_curve.png")
    if curve:
        run.artifact(curve)
    saved_model = local_copy(storage, model_dir.saved_model, workdir, "saved_model")
    if saved_model is None:
        log(f"warning: tracking: no SavedModel in {model_dir.path}; no model is logged")
        return
    run.artifact(contract.spec_asset(saved_model))
    log_model(run, saved_model, workdir, register, alias, log)


def log_model(run: TrackedRun, saved_model: str, workdir: str, register: str, alias: str,
              log: Callable[[str], None]) -> None:
    """The SavedModel (a local copy) as the run's MLflow model, then a registered version of it."""

    def send(r: TrackedRun) -> None:
        out = mlflow_model.save(saved_model, os.path.join(workdir, "mlflow-model"))
        r.tracking.client.log_artifacts(r.id, out, mlflow_model.ARTIFACT_PATH)
        if register:
            source = f"{r.artifact_uri}/{mlflow_model.ARTIFACT_PATH}"
            registry.register_version(r.tracking.client, register, source, r.id, alias, log)

    run.call(send)
