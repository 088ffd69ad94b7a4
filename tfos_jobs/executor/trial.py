"""One sweep trial, run as a Spark task on an executor: train in this process, export,
and leave everything the driver needs in its `search.trials.TrialDir`.

Errors are caught and written to the trial's `result.json`, so a trial that fails is
recorded as failed and Spark does not retry it; a lost executor, by contrast, fails the
task, Spark runs it again elsewhere and it resumes from its last finished epoch.
"""
from __future__ import annotations

import os
import shutil
import socket
import time
import traceback
from typing import Any

from tfos_jobs.contracts.node_args import NodeArgs
from tfos_jobs.progress_log import read_progress
from tfos_jobs.search.early_stopping import metric_history, should_stop
from tfos_jobs.search.trials import TrialDir, TrialResult, TrialStatus, trial_result


def run_trial(payload: dict[str, Any]) -> TrialResult:
    """`payload`: plain values (trial number, settings, its directory, node args as
    `NodeArgs.to_dict()`, metric and stopping rule)."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.pop("TF_CONFIG", None)  # a Python worker that earlier ran a TF node keeps its TF_CONFIG
    directory, args = TrialDir(payload["trial_dir"]), NodeArgs.from_dict(payload["args"])
    started = time.time()
    error = None
    stopper = None
    try:
        from tfos_jobs.executor import training

        training.configure_threads(args.threads)  # trials share the executors' cores
        os.makedirs(args.run_dir, exist_ok=True)
        if payload["early_stopping"]:
            stopper = median_stop(directory, payload["metric"], payload["goal"], payload["warmup_epochs"],
                                  payload["min_trials"])
        training.fit_and_export(args, role="chief", worker_index=0, num_workers=1,
                                extra_callbacks=(stopper,) if stopper else ())
        status = TrialStatus.PRUNED if stopper is not None and stopper.skip_export else TrialStatus.COMPLETED
    except Exception as e:
        status = TrialStatus.FAILED
        error = f"{type(e).__name__}: {e}".strip()
        directory.write_error(traceback.format_exc())
    finally:
        _clear_keras_state()
    result = trial_result(payload["trial"], payload["settings"], directory, payload["metric"], status, error,
                          started, host=socket.gethostname(), pid=os.getpid())
    shutil.rmtree(args.run_dir, ignore_errors=True)
    directory.write_result(result)
    return result


def median_stop(directory: TrialDir, metric: str, goal: str, warmup_epochs: int, min_trials: int):
    """A Keras callback that stops this trial by the median rule after each epoch."""
    import tensorflow as tf

    class MedianStop(tf.keras.callbacks.Callback):
        skip_export = False

        def on_epoch_end(self, epoch, logs=None):
            own = metric_history(read_progress(directory.progress), metric)
            others = [metric_history(read_progress(p), metric) for p in directory.others_progress()]
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
