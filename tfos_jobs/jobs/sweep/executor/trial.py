"""One sweep trial, run as a Spark task on an executor: train in this process and export,
reporting to the sweep's driver over the control channel.

The task's partition holds the dataset's files (read by Spark from wherever the dataset
lives); the trial trains from its local copy, reports each epoch, publishes its model and
resume state through the driver, and returns how it ended. Errors are caught and reported, so
a trial that fails is recorded as failed and Spark does not retry it; a lost executor, by
contrast, fails the task, Spark runs it again elsewhere and it resumes from its last
published epoch.
"""
from __future__ import annotations

import os
import socket
import traceback
from typing import Iterator

from tfos_jobs import control_channel as cc
from tfos_jobs.contracts.sweep_dir import TrialDir
from tfos_jobs.contracts.trial import TrialPayload
from tfos_jobs.contracts.workspace import Workspace
from tfos_jobs.cluster.node import lifecycle, local_disk
from tfos_jobs.contracts.trial import TrialOutcome, TrialStatus
from tfos_jobs.tf_import import tensorflow
from tfos_jobs.topology import Role


def task(payload: TrialPayload, secret: bytes):
    """The function of a trial's Spark task (`mapPartitions` over its input files); `secret`
    reaches it only here."""

    def run(records: Iterator[tuple[str, bytes]]) -> Iterator[TrialOutcome]:
        yield run_trial(payload, secret, records)

    return run


def run_trial(payload: TrialPayload, secret: bytes, records: Iterator[tuple[str, bytes]]) -> TrialOutcome:
    os.environ.pop("TF_CONFIG", None)  # before TensorFlow reads it
    tensorflow()  # a Python worker that earlier ran a TF node keeps its TF_CONFIG
    from tfos_jobs.cluster.node import inputs
    from tfos_jobs.cluster.node.control_client import ControlClient, DriverLink

    number, args = payload.trial, payload.args
    client = ControlClient(payload.server, secret)
    link = DriverLink(client, {cc.SENDER_TRIAL: number})
    workspace = Workspace.of(payload.local_dir, payload.run_id, TrialDir.name(number))
    error = None
    try:
        from tfos_jobs.cluster.node import training

        workspace.enter()
        lifecycle.start_reaper(os.getpid(), [], workspace)  # a trial cancelled by the time budget leaves no files
        inputs.receive(records, dict(payload.inputs), workspace.root)
        link.fetch(cc.BACKUP, workspace.backup)  # a trial stopped part-way resumes
        training.configure_threads(args.threads)  # trials share the executors' cores
        pruner = pruning(link, payload.metric) if payload.pruning else None
        with training.temp_files_in(workspace.scratch):
            training.fit_and_export(args, role=Role.CHIEF, worker_index=0, num_workers=1, link=link,
                                    workspace=workspace, extra_callbacks=(pruner,) if pruner else ())
        status = TrialStatus.PRUNED if pruner is not None and pruner.skip_export else TrialStatus.COMPLETED
    except Exception as e:
        status = TrialStatus.FAILED
        error = local_disk.full_message(payload.local_dir) if local_disk.is_full(e) else f"{type(e).__name__}: {e}".strip()
        try:
            link.failed(local_disk.explained(e, traceback.format_exc(), payload.local_dir))
        except Exception:  # the outcome below still says why
            pass
    finally:
        _clear_keras_state()
        workspace.leave()
        client.close()
    return TrialOutcome(status=status.value, error=error, host=socket.gethostname(), pid=os.getpid())


def pruning(link, metric: str):
    """A Keras callback that, after each epoch, sends the epoch and its `metric` to the driver,
    where the sweep's study and pruner live, and stops this trial, without exporting, when the
    driver says so (`skip_export`)."""
    import tensorflow as tf

    class Pruning(tf.keras.callbacks.Callback):
        skip_export = False

        def on_epoch_end(self, epoch, logs=None):
            value = (logs or {}).get(metric)
            if link.should_prune(epoch + 1, None if value is None else float(value)):
                self.skip_export = True
                self.model.stop_training = True

    return Pruning()


def _clear_keras_state() -> None:
    """Python workers are reused: free the model and graph before the next trial comes."""
    try:
        import tensorflow as tf

        tf.keras.backend.clear_session()
    except Exception:
        pass
