"""Step checkpoints and the resume (cluster.node.checkpoints, data.reader's skip): a run stopped
mid-epoch and resumed from its last step checkpoint learns exactly what an unbroken run learns.
tests/cluster and tests/reliability run the same with `tfos train` and a killed executor."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from tfos_jobs.cluster.node.checkpoints import Position, backup_and_restore, resume_position
from tfos_jobs.data import reader
from tfos_jobs.features.spec import FeatureSpec, KeyFeature, Label, NumericFeature

SPEC = FeatureSpec((KeyFeature("id"), NumericFeature("x", default=0.0),
                    Label("y", positive=("1",), negative=("0",)))).check()
STEPS, EPOCHS, BATCH = 7, 3, 8


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> list[str]:
    rng = np.random.default_rng(3)
    path = tmp_path_factory.mktemp("records") / "part-0"
    with tf.io.TFRecordWriter(str(path)) as out:
        for _ in range(50):
            x = float(rng.normal())
            example = tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[x])),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(x + rng.normal(0, 0.5) > 0)]))}))
            out.write(example.SerializeToString())
    return [str(path)]


def batches(records: list[str], *, in_memory: bool, skip: int = 0):
    return reader.make_dataset(records, SPEC, BATCH, shuffle=True, seed=5, repeat=True, in_memory=in_memory,
                               skip_batches=skip)


def xs(dataset, n: int) -> list[list[float]]:
    return [features["x"].numpy().tolist() for features, _ in dataset.take(n)]


def test_in_memory_input_skips_to_exactly_where_an_unbroken_pass_is(records):
    whole = xs(batches(records, in_memory=True), 30)
    assert xs(batches(records, in_memory=True, skip=17), 13) == whole[17:]
    assert whole[7:14] != whole[:7]  # each epoch its own order: skipping must count epochs too


def test_streamed_input_skips_as_many_records(records):
    unshuffled = reader.make_dataset(records, SPEC, BATCH, repeat=True, skip_batches=3)
    plain = reader.make_dataset(records, SPEC, BATCH, repeat=True)
    assert xs(unshuffled, 2) == xs(plain, 5)[3:]


class StopAt(tf.keras.callbacks.Callback):
    """A failure after `step` steps of the run."""

    def __init__(self, step: int):
        super().__init__()
        self.step, self.epoch = step, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch * STEPS + batch + 1 == self.step:
            raise RuntimeError("the node was lost")


def train(records: list[str], backup: Path, *, every_calls: int, steps_per_execution: int = 1,
          callbacks: tuple = ()) -> tuple[list[np.ndarray], Position]:
    """A run as a node does it: the resume position read first, the input skipped to it."""
    tf.keras.utils.set_random_seed(11)
    position = resume_position(str(backup), STEPS, step_checkpoints=every_calls > 0)
    inputs = tf.keras.Input(shape=(), name="x")
    model = tf.keras.Model({"x": inputs}, tf.keras.layers.Dense(1, activation="sigmoid")(
        tf.keras.layers.Dense(4, activation="relu")(tf.expand_dims(inputs, -1))))
    model.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="binary_crossentropy",
                  steps_per_execution=steps_per_execution)
    saved: list[int] = []
    backup_cb = backup_and_restore(str(backup), parameter_server=False, every_calls=every_calls,
                                   steps_per_epoch=STEPS, saved=lambda: saved.append(1))
    data = batches(records, in_memory=True, skip=position.batches(STEPS)).map(
        lambda features, label: (features, tf.cast(label, tf.float32)))
    model.fit(data, epochs=EPOCHS, steps_per_epoch=STEPS, callbacks=[backup_cb, *callbacks], verbose=0)
    return model.get_weights(), position


def test_a_run_stopped_mid_epoch_resumes_at_its_step_checkpoint_and_learns_the_same_weights(records, tmp_path):
    whole, start = train(records, tmp_path / "whole", every_calls=2)
    assert start == Position()
    with pytest.raises(RuntimeError, match="the node was lost"):
        train(records, tmp_path / "cut", every_calls=2, callbacks=(StopAt(STEPS + 5),))
    # checkpoints at steps 2, 4, 6 and the epoch's end (7) of epoch 1; 9 and 11 of epoch 2
    assert resume_position(str(tmp_path / "cut"), STEPS, step_checkpoints=True) == Position(1, 4)
    resumed, position = train(records, tmp_path / "cut", every_calls=2)
    assert position == Position(1, 4)
    for a, b in zip(resumed, whole):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_checkpoint_records_the_last_step_of_a_multi_step_call(records, tmp_path):
    """With 2 steps per call, the checkpoint after a call holds both steps' updates: the resume
    starts after the second one, not after the first."""
    with pytest.raises(RuntimeError, match="the node was lost"):
        train(records, tmp_path / "cut", every_calls=1, steps_per_execution=2, callbacks=(StopAt(4),))
    assert resume_position(str(tmp_path / "cut"), STEPS, step_checkpoints=True) == Position(0, 4)


def test_with_epoch_checkpoints_only_a_resume_starts_at_the_next_epoch(records, tmp_path):
    with pytest.raises(RuntimeError, match="the node was lost"):
        train(records, tmp_path / "cut", every_calls=0, callbacks=(StopAt(STEPS + 5),))
    assert resume_position(str(tmp_path / "cut"), STEPS, step_checkpoints=False) == Position(1, 0)
    assert resume_position(str(tmp_path / "none"), STEPS, step_checkpoints=False) == Position()


def test_a_backup_whose_publication_was_killed_between_its_renames_is_resumed(tmp_path):
    """The driver killed after moving the old backup aside, before renaming the new one into
    place: run again, it puts the old one back and resumes from it."""
    from tfos_jobs.contracts.model_dir import ModelDir
    from tfos_jobs.jobs.train.driver.job import _prepare_model_dir
    from tfos_jobs.storage import Storage

    model_dir = ModelDir(f"file:{tmp_path}/model")
    aside = tmp_path / "model" / "backup.old-0123456789" / "chief"
    aside.mkdir(parents=True)
    (aside / "checkpoint").write_text("model_checkpoint_path: \"ckpt-3\"\n")
    (tmp_path / "model" / "progress.jsonl").write_text("{}\n")
    assert _prepare_model_dir(Storage(None), model_dir, overwrite=False) is True
    assert (tmp_path / "model" / "backup" / "chief" / "checkpoint").exists()
    assert not list((tmp_path / "model").glob("backup.old-*")) and (tmp_path / "model" / "progress.jsonl").exists()
