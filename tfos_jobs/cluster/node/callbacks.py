"""The Keras callbacks of a TF node: what it reports to the driver while it trains (epochs, the
first step, heartbeats), what it publishes (resume state, TensorBoard logs), and the resume
state itself."""
from __future__ import annotations

import copy
import os
import shutil
import threading
import time

from tfos_jobs import control_channel as cc
from tfos_jobs.cluster.node.control_client import DriverLink
from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.contracts.workspace import Workspace


# Under ParameterServerStrategy each variable lives on a parameter server, which by default
# reads and writes its part of a checkpoint or SavedModel on its own host's disk: on a cluster
# that shares no disk, the chief would find none of it. The chief does all file access instead.
CHIEF_DEVICE = "/job:chief/replica:0/task:0/device:CPU:0"


def backup_and_restore(backup_dir: str, parameter_server: bool):
    """Keras BackupAndRestore; under ParameterServerStrategy its checkpoints are written and
    read by the chief (`CHIEF_DEVICE`), on the chief's disk."""
    import tensorflow as tf

    callback = tf.keras.callbacks.BackupAndRestore(backup_dir=backup_dir)
    if not parameter_server:
        return callback
    from tf_keras.src.distribute import worker_training_state

    original = worker_training_state.WorkerTrainingState

    def on_chief(options):
        """`options` (the checkpoint manager's, which carry its bookkeeping callbacks) with the
        chief as the device that does the file access."""
        options = copy.copy(options) if options is not None else tf.train.CheckpointOptions()
        options.experimental_io_device = CHIEF_DEVICE
        return options

    class OnTheChief(original):  # type: ignore[valid-type,misc]  # Keras' class, looked up at runtime
        """The training state Keras builds, with every checkpoint read and write on the chief."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            for manager in (self.read_checkpoint_manager, self.write_checkpoint_manager):
                checkpoint = manager._checkpoint
                write, restore = checkpoint._write, checkpoint.restore
                checkpoint._write = lambda prefix, options=None, _write=write: _write(prefix, options=on_chief(options))
                checkpoint.restore = lambda path, options=None, _restore=restore: _restore(path, options=on_chief(options))

    class ChiefBackup(type(callback)):  # type: ignore[misc]  # the class of the callback TF built
        def on_train_begin(self, logs=None):
            worker_training_state.WorkerTrainingState = OnTheChief
            try:
                super().on_train_begin(logs)
            finally:
                worker_training_state.WorkerTrainingState = original

    return ChiefBackup(backup_dir=backup_dir)


class Publisher:
    """The chief's files the driver keeps in the model directory. The resume state is published
    at every epoch's end, before the epoch is reported: a relaunch resumes after any epoch the
    driver has shown. TensorBoard logs are copied at the epoch's end and published from a
    thread of their own while the next epoch trains (when that falls behind, only the newest
    copy waits)."""

    def __init__(self, link: DriverLink, workspace: Workspace):
        self.link, self.workspace = link, workspace
        self._pending: str | None = None
        self._cond = threading.Condition()
        self._stopping = False
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tfos-publisher", daemon=True)
        self._thread.start()

    def callback(self, logs: bool):
        import tensorflow as tf

        publisher = self

        class PublishState(tf.keras.callbacks.Callback):
            _supports_tf_logs = True

            def on_epoch_end(self, epoch, logs_=None):
                publisher.link.publish(cc.BACKUP, publisher.workspace.backup)
                if logs:
                    publisher.snapshot_logs(epoch)

        return PublishState()

    def snapshot_logs(self, epoch: int) -> None:
        if self.error is not None:
            raise RuntimeError(f"publishing the TensorBoard logs failed: {self.error}") from self.error
        if not os.path.isdir(self.workspace.logs):
            return
        copy = os.path.join(self.workspace.own, f"logs-{epoch}")
        shutil.copytree(self.workspace.logs, copy)  # the writers go on appending to the originals
        with self._cond:
            if self._pending is not None:
                shutil.rmtree(self._pending, ignore_errors=True)
            self._pending = copy
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._stopping:
                    self._cond.wait()
                if self._pending is None:
                    return
                copy, self._pending = self._pending, None
            try:
                self.link.publish(cc.LOGS, copy)
            except BaseException as e:  # raised in the training thread at the next epoch's end
                self.error = e
            finally:
                shutil.rmtree(copy, ignore_errors=True)

    def finish(self) -> None:
        """Wait for what is being published; drop what still waits (the end publishes the logs whole)."""
        with self._cond:
            if self._pending is not None:
                shutil.rmtree(self._pending, ignore_errors=True)
                self._pending = None
            self._stopping = True
            self._cond.notify()
        self._thread.join()


def epoch_progress(link: DriverLink, epochs: int, steps: int, examples_per_step: int):
    """A callback with which the chief reports one line per finished epoch to the driver, which
    shows it at once and keeps it in `progress.jsonl`.

    `examples_per_sec` counts the training steps' time only (epoch start to the start of
    validation); `eval_seconds` is the validation that follows, `seconds` the whole epoch."""
    import tensorflow as tf

    class EpochProgress(tf.keras.callbacks.Callback):
        _supports_tf_logs = True  # no batch hooks; epoch logs arrive as numbers anyway

        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.time()
            self.eval_start = None

        def on_test_begin(self, logs=None):
            if getattr(self, "start", None) is not None and self.eval_start is None:
                self.eval_start = time.time()

        def on_epoch_end(self, epoch, logs=None):
            end = time.time()
            trained = (self.eval_start or end) - self.start
            link.progress(EpochLine(
                epoch + 1, epochs, seconds=round(end - self.start, 3), eval_seconds=round(end - (self.eval_start or end), 3),
                examples_per_sec=round(steps * examples_per_step / max(trained, 1e-9), 1), time=end,
                metrics={k: float(v) for k, v in (logs or {}).items()}))

    return EpochProgress()


def first_step(link: DriverLink, per_batch: bool = True):
    """Reports the first finished training step, once: the driver reports cluster start-up as
    reservation to first step. Without batch callbacks (parameter servers) it is the end of
    the first epoch."""
    import tensorflow as tf

    class FirstStep(tf.keras.callbacks.Callback):
        written = False
        _supports_tf_logs = True  # it reads no logs: Keras need not fetch them per batch

        def _write(self, *_):
            if not self.written:
                self.written = True
                link.first_step()

        if per_batch:
            on_train_batch_end = _write
        else:
            on_epoch_end = _write

    return FirstStep()


def heartbeat(link: DriverLink, every: float = 2.0, per_batch: bool = True):
    """Beats at most every `every` seconds while steps finish: the driver declares the run hung
    when the beats stop (train.step_timeout). ParameterServerStrategy allows no batch-level
    callbacks, so there it beats once per epoch."""
    import tensorflow as tf

    class Heartbeat(tf.keras.callbacks.Callback):
        last = 0.0
        _supports_tf_logs = True  # it reads no logs: Keras need not fetch them per batch

        def _beat(self, *_):
            now = time.time()
            if now - self.last >= every:
                self.last = now
                link.beat()

        on_train_begin = on_epoch_begin = on_epoch_end = _beat

    class BatchHeartbeat(Heartbeat):
        on_train_batch_end = on_test_batch_end = Heartbeat._beat

    return BatchHeartbeat() if per_batch else Heartbeat()
