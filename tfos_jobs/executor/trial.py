"""One sweep trial, run as a Spark task on an executor: train in this process, export,
and leave everything the driver needs in `<sweep_dir>/trial-<n>/`.

Errors are caught and written to the trial's `result.json`, so a trial that fails is
recorded as failed and Spark does not retry it; a lost executor, by contrast, fails the
task, Spark runs it again elsewhere and it resumes from its last finished epoch.
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import time
import traceback
from typing import Any

from tfos_jobs.executor import lifecycle
from tfos_jobs.progress_log import read_progress
from tfos_jobs.search.early_stopping import metric_history, should_stop


def run_trial(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload`: plain values (trial number, settings, node args, metric and stopping rule)."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.pop("TF_CONFIG", None)  # a Python worker that earlier ran a TF node keeps its TF_CONFIG
    trial_dir, args = payload["trial_dir"], payload["args"]
    started = time.time()
    error = None
    stopper = None
    try:
        from tfos_jobs.executor import training

        training.configure_threads(args["threads"])  # trials share the executors' cores
        os.makedirs(args["run_dir"], exist_ok=True)
        if payload["early_stopping"]:
            stopper = median_stop(payload["sweep_dir"], trial_dir, payload["metric"], payload["goal"],
                                  payload["warmup_epochs"], payload["min_trials"])
        training.fit_and_export(args, role="chief", worker_index=0, num_workers=1,
                                extra_callbacks=(stopper,) if stopper else ())
        status = "pruned" if stopper is not None and stopper.skip_export else "completed"
    except Exception as e:
        status = "failed"
        error = f"{type(e).__name__}: {e}".strip()
        lifecycle.write_text(f"{trial_dir}/error.txt", traceback.format_exc())
    finally:
        _clear_keras_state()
    result = trial_result(payload["trial"], payload["settings"], trial_dir, payload["metric"], status, error,
                          started, host=socket.gethostname(), pid=os.getpid())
    shutil.rmtree(args["run_dir"], ignore_errors=True)
    lifecycle.write_json(f"{trial_dir}/result.json", result)
    return result


def trial_result(trial: int, settings: dict[str, Any], trial_dir: str, metric: str, status: str,
                 error: str | None, started: float, host: str | None = None, pid: int | None = None) -> dict[str, Any]:
    """A trial's row of the results: who ran it when, and `summarise` of its progress."""
    finished = time.time()
    return {"trial": trial, "settings": settings, "started": started, "host": host, "pid": pid, "error": error,
            **summarise(trial_dir, metric, status, error), "finished": finished,
            "seconds": round(finished - started, 2)}


def summarise(trial_dir: str, metric: str, status: str, error: str | None) -> dict[str, Any]:
    """Status, the metric's final value and the last epoch's metrics, from the trial's progress."""
    lines = read_progress(f"{trial_dir}/progress.jsonl")
    history = metric_history(lines, metric)
    out: dict[str, Any] = {"status": status, "value": history[-1] if history else None,
                           "epochs_run": len(history) if history else len({line["epoch"] for line in lines}),
                           "metrics": {k: v for k, v in (lines[-1] if lines else {}).items()
                                       if k not in ("epoch", "epochs", "time", "seconds", "eval_seconds", "examples_per_sec")}}
    if status != "failed" and not history:
        available = sorted(out["metrics"]) or ["(no epoch finished)"]
        out.update(status="failed", error=error or f"metric {metric!r} is not among the trial's metrics: {', '.join(available)}")
    return out


def median_stop(sweep_dir: str, trial_dir: str, metric: str, goal: str, warmup_epochs: int, min_trials: int):
    """A Keras callback that stops this trial by the median rule after each epoch."""
    import tensorflow as tf

    own_path = f"{trial_dir}/progress.jsonl"

    class MedianStop(tf.keras.callbacks.Callback):
        skip_export = False

        def on_epoch_end(self, epoch, logs=None):
            own = metric_history(read_progress(own_path), metric)
            others = [metric_history(read_progress(p), metric)
                      for p in glob.glob(f"{glob.escape(sweep_dir)}/trial-*/progress.jsonl") if p != own_path]
            if should_stop(own, others, goal, warmup_epochs, min_trials):
                self.skip_export = True
                self.model.stop_training = True

    return MedianStop()


def _clear_keras_state() -> None:
    """Python workers are reused: free the model and graph before the next trial comes."""
    try:
        import tensorflow as tf

        tf.keras.backend.clear_session()
    except Exception:
        pass
