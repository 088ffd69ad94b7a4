"""The Keras callbacks of a TF node: what it reports to the driver while it trains (epochs, the first step, heartbeats)
and what it publishes (resume state, TensorBoard logs). The resume state itself is in `cluster.node.checkpoints`."""
from __future__ import annotations

import os
import shutil
import threading
import time

from tfos_jobs import control_channel as cc
from tfos_jobs.cluster.node.checkpoints import Position
from tfos_jobs.cluster.node.control_client import DriverLink
from tfos_jobs.contracts.epoch_line import EpochLine
from tfos_jobs.contracts.workspace import Workspace


class Publisher:
    """The chief's files the driver keeps in the model directory. The resume state is published at every epoch's end,
    before the epoch is reported: a relaunch resumes after any epoch the driver has shown. A step checkpoint
    (`cluster.node.checkpoints`) and the TensorBoard logs (at the epoch's end) are copied and published from a thread of
    their own while training goes on; when that falls behind, only the newest copy of each waits."""

    def __init__(self, link: DriverLink, workspace: Workspace):
        self.link, self.workspace = link, workspace
        self._pending: dict[str, str] = {}  # target -> the copy that waits
        self._in_flight: str | None = None  # the target the thread is publishing
        self._copies = 0
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
                publisher.publish_backup()
                if logs and os.path.isdir(publisher.workspace.logs):
                    publisher.snapshot(cc.LOGS, publisher.workspace.logs)

        return PublishState()

    def publish_backup(self) -> None:
        """The resume state, now: a step checkpoint still waiting is older, and dropped; one
        being published is waited for (a target takes one upload at a time)."""
        self._raise_error()
        with self._cond:
            self._drop(cc.BACKUP)
            while self._in_flight == cc.BACKUP:
                self._cond.wait()
        self.link.publish(cc.BACKUP, self.workspace.backup)

    def step_checkpoint(self) -> None:
        """A step checkpoint was just written: published in the background."""
        self.snapshot(cc.BACKUP, self.workspace.backup)

    def snapshot(self, target: str, directory: str) -> None:
        self._raise_error()
        self._copies += 1
        copy = os.path.join(self.workspace.own, f"{target}-{self._copies}")
        shutil.copytree(directory, copy)  # the writers go on changing the originals
        with self._cond:
            self._drop(target)
            self._pending[target] = copy
            self._cond.notify_all()

    def _drop(self, target: str) -> None:
        waiting = self._pending.pop(target, None)
        if waiting is not None:
            shutil.rmtree(waiting, ignore_errors=True)

    def _raise_error(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"publishing to the driver failed: {self.error}") from self.error

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopping:
                    self._cond.wait()
                if not self._pending:
                    return
                target = cc.BACKUP if cc.BACKUP in self._pending else next(iter(self._pending))
                copy, self._in_flight = self._pending.pop(target), target
            try:
                self.link.publish(target, copy)
            except BaseException as e:  # raised in the training thread at its next publication
                self.error = e
            finally:
                shutil.rmtree(copy, ignore_errors=True)
                with self._cond:
                    self._in_flight = None
                    self._cond.notify_all()

    def finish(self) -> None:
        """Wait for what is being published; drop what still waits (the end publishes the logs whole)."""
        with self._cond:
            for target in list(self._pending):
                self._drop(target)
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()


def epoch_progress(link: DriverLink, epochs: int, steps: int, examples_per_step: int, resumed: Position):
    """A callback with which the chief reports one line per finished epoch to the driver, which
    shows it at once and keeps it in `progress.jsonl`.

    `examples_per_sec` counts the training steps' time only (epoch start to the start of validation; an epoch resumed
    mid-way, its remaining steps); `eval_seconds` is the validation that follows, `seconds` the whole epoch."""
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
            done = steps - resumed.step if epoch == resumed.epoch else steps
            link.progress(EpochLine(
                epoch + 1, epochs, seconds=round(end - self.start, 3), eval_seconds=round(end - (self.eval_start or end), 3),
                examples_per_sec=round(done * examples_per_step / max(trained, 1e-9), 1), time=end,
                metrics={k: float(v) for k, v in (logs or {}).items()}))

    return EpochProgress()


def first_step(link: DriverLink, resumed_at: int, per_batch: bool = True):
    """Reports the first finished training step, once, with the step the run resumed at: the
    driver reports cluster start-up as reservation to first step, and a relaunch's steps
    trained again. Without batch callbacks (parameter servers) it is the end of the first epoch."""
    import tensorflow as tf

    class FirstStep(tf.keras.callbacks.Callback):
        written = False
        _supports_tf_logs = True  # it reads no logs: Keras need not fetch them per batch

        def _write(self, *_):
            if not self.written:
                self.written = True
                link.first_step(resumed_at)

        if per_batch:
            on_train_batch_end = _write
        else:
            on_epoch_end = _write

    return FirstStep()


def heartbeat(link: DriverLink, steps: int, resumed_at: int, every: float = 0.5, per_batch: bool = True):
    """Beats at most every `every` seconds while steps finish, with the steps done so far: the driver declares the run
    hung when the beats stop (train.step_timeout), and knows how far a failed attempt got. ParameterServerStrategy
    allows no batch-level callbacks, so there it beats once per epoch."""
    import tensorflow as tf

    class Heartbeat(tf.keras.callbacks.Callback):
        last = 0.0
        done = resumed_at
        epoch = 0
        _supports_tf_logs = True  # it reads no logs: Keras need not fetch them per batch

        def _beat(self) -> None:
            now = time.time()
            if now - self.last >= every:
                self.last = now
                link.beat(self.done)

        def on_train_begin(self, logs=None):
            self._beat()

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch
            self._beat()

        def on_epoch_end(self, epoch, logs=None):
            self.done = (epoch + 1) * steps
            self._beat()

    class BatchHeartbeat(Heartbeat):
        def on_train_batch_end(self, batch, logs=None):
            self.done = self.epoch * steps + int(batch) + 1  # a numpy integer in an epoch Keras resumed mid-way
            self._beat()

        def on_test_batch_end(self, batch, logs=None):
            self._beat()

    return BatchHeartbeat() if per_batch else Heartbeat()
