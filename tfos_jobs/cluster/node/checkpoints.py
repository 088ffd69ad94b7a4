"""A TF node's resume state: Keras's BackupAndRestore at every epoch's end and, but under
parameter_server, every `train.checkpoint_steps` steps; and where a resumed run stands in its data.

Keras resumes a run mid-epoch from a step checkpoint, but its input starts again from the
beginning; the node skips the batches the checkpoint has already trained (`Position.batches`),
so a resumed run sees its data in the order an uninterrupted run would (`data.reader`).
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Callable

from tfos_jobs.topology import Role

# Under ParameterServerStrategy each variable lives on a parameter server, which by default
# reads and writes its part of a checkpoint or SavedModel on its own host's disk: on a cluster
# that shares no disk, the chief would find none of it. The chief does all file access instead.
CHIEF_DEVICE = "/job:chief/replica:0/task:0/device:CPU:0"

# Where Keras's training state keeps its checkpoints inside the backup directory (named after the chief, who writes the
# ones kept), and the names of the counters it saves with the model (tf_keras' WorkerTrainingState).
_CHECKPOINTS = Role.CHIEF.value
_EPOCH, _BATCH = "ckpt_saved_epoch/.ATTRIBUTES/VARIABLE_VALUE", "ckpt_saved_batch/.ATTRIBUTES/VARIABLE_VALUE"


@dataclass(frozen=True)
class Position:
    """Where a run resumes: the epoch (from 0) and the step within it (from 0) it trains next."""

    epoch: int = 0
    step: int = 0

    def batches(self, steps_per_epoch: int) -> int:
        """Steps trained before this position: under MultiWorkerMirrored and alone, the batches
        each worker's input skips."""
        return self.epoch * steps_per_epoch + self.step


def saved_at(backup_dir: str) -> tuple[int, int] | None:
    """(epoch, step) of the newest checkpoint in `backup_dir` as Keras recorded them (-1: not
    recorded), or None without one."""
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(os.path.join(backup_dir, _CHECKPOINTS))
    if latest is None:
        return None
    reader = tf.train.load_checkpoint(latest)
    return int(reader.get_tensor(_EPOCH)), int(reader.get_tensor(_BATCH))


def resume_position(backup_dir: str, steps_per_epoch: int, *, step_checkpoints: bool) -> Position:
    """Where Keras will resume from the backup in `backup_dir` (its own rule, read before `fit`
    so the input can skip what was trained): after a step checkpoint, the next step; after an
    epoch checkpoint, the next epoch; with no backup, the start."""
    saved = saved_at(backup_dir)
    if saved is None:
        return Position()
    epoch, batch = saved
    if step_checkpoints:
        if batch < 0:
            return Position()
        return Position(epoch + 1, 0) if batch >= steps_per_epoch - 1 else Position(epoch, batch + 1)
    return Position(epoch + 1, 0) if epoch >= 0 else Position()


def backup_and_restore(backup_dir: str, *, parameter_server: bool, every_calls: int = 0, steps_per_epoch: int = 0,
                       saved: Callable[[], None] | None = None):
    """Keras BackupAndRestore. With `every_calls`, it also writes a checkpoint every that many callback calls and calls
    `saved` after each one written mid-epoch (the chief publishes it); the epoch-end checkpoint stays, so every epoch
    the driver shows can be resumed after. Under ParameterServerStrategy (epoch checkpoints only) the chief reads and
    writes them (`CHIEF_DEVICE`), on its own disk."""
    import tensorflow as tf

    if parameter_server:
        return _on_the_chief(backup_dir)
    if not every_calls:
        return tf.keras.callbacks.BackupAndRestore(backup_dir=backup_dir)

    class StepBackup(tf.keras.callbacks.BackupAndRestore):
        calls = 0  # since the last checkpoint

        def on_train_batch_end(self, batch, logs=None):
            # Keras records the step a call began with, but the weights saved are those after
            # its last step: record that one, or a resume trains the call's other steps again.
            self.calls += 1
            if self.calls < every_calls or batch >= steps_per_epoch - 1:  # the epoch's end saves that one
                return
            self.calls = 0
            self._training_state._ckpt_saved_batch.assign(batch)
            self._backup(epoch=self._current_epoch, batch=batch)
            if saved is not None:
                saved()

        def on_epoch_end(self, epoch, logs=None):
            self.calls = 0
            self._training_state._ckpt_saved_batch.assign(steps_per_epoch - 1)
            self._backup(epoch=epoch, batch=steps_per_epoch - 1)

    return StepBackup(backup_dir=backup_dir, save_freq=every_calls)


def _on_the_chief(backup_dir: str):
    import tensorflow as tf
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

    class ChiefBackup(tf.keras.callbacks.BackupAndRestore):
        def on_train_begin(self, logs=None):
            worker_training_state.WorkerTrainingState = OnTheChief
            try:
                super().on_train_begin(logs)
            finally:
                worker_training_state.WorkerTrainingState = original

    return ChiefBackup(backup_dir=backup_dir)
