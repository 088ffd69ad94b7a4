"""A model its function compiled keeps its compile (model.builder.compile_for_training), and one with a training
step of its own keeps that step (model.steps.keeps_own_steps); the held-out test split is scored with both the label
task's figures and the model's own (cluster.node.trained.split_metrics). tests/cluster/test_training.py trains both
kinds on a TF cluster."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfos_jobs import api, config
from tfos_jobs.cluster.node.trained import split_metrics
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FeatureSpec, KeyFeature, Label, NumericFeature
from tfos_jobs.model import steps
from tfos_jobs.model.builder import compile_for_training, describe_compile, own_compile

from tests.conftest import CENSUS, ROOT

SPEC = FeatureSpec((KeyFeature("id"), NumericFeature("x", default=0.0),
                    Label("y", positive=("1",), negative=("0",)))).check()
ROWS = 60


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> tuple[list[str], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    x = rng.normal(size=ROWS).astype(np.float32)
    y = (x + rng.normal(0, 0.7, ROWS) > 0).astype(np.int64)
    path = tmp_path_factory.mktemp("records") / "part-0"
    with tf.io.TFRecordWriter(str(path)) as out:
        for xi, yi in zip(x, y):
            out.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[float(xi)])),
                "y": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(yi)]))})).SerializeToString())
    return [str(path)], x, y


def logistic(cls=tf.keras.Model) -> tf.keras.Model:
    tf.keras.utils.set_random_seed(1)
    x = tf.keras.Input(shape=(), name="x")
    out = tf.keras.layers.Dense(1, activation="sigmoid")(tf.keras.layers.Reshape((1,))(x))
    return cls({"x": x}, out)


def focal(model: tf.keras.Model) -> tf.keras.Model:
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss=tf.keras.losses.BinaryFocalCrossentropy(name="focal"),
                  metrics=[tf.keras.metrics.Precision(name="precision"), "accuracy"])
    return model


def test_the_training_model_takes_the_functions_compile_and_an_uncompiled_one_the_tasks():
    model = focal(logistic())
    assert own_compile(logistic()) is None
    assert describe_compile(own_compile(model)) == "loss focal; metrics precision, accuracy; optimizer SGD (learning rate 0.05)"
    trainer = compile_for_training(steps.wrap(model, 0), model, SPEC, "adam", 0.5)
    assert trainer is not model and trainer.optimizer is model.optimizer
    assert trainer.compiled_loss._user_losses.name == "focal"
    plain = logistic()
    trainer = compile_for_training(steps.wrap(plain, 0), plain, SPEC, "adam", 0.5)
    assert type(trainer.optimizer).__name__ == "Adam" and float(trainer.optimizer.learning_rate) == 0.5
    assert isinstance(trainer.compiled_loss._user_losses, tf.keras.losses.BinaryCrossentropy)


class OwnStep(tf.keras.Model):
    def train_step(self, data):
        return {"own": tf.constant(1.0)}


def test_a_model_with_its_own_step_is_trained_as_it_is():
    own = logistic(OwnStep)
    assert steps.keeps_own_steps(own) and steps.wrap(own, 0) is own
    plain = logistic()
    assert not steps.keeps_own_steps(plain) and isinstance(steps.wrap(plain, 0), steps.StepModel)


def test_the_test_split_is_scored_by_the_task_and_by_the_models_own_compile(records):
    files, x, y = records
    model = focal(logistic())
    figures = split_metrics(model, files, SPEC, "none", 16)
    assert set(figures) == {"loss", "accuracy", "auc", "precision"}  # the task's accuracy for the string "accuracy"
    p = model({"x": tf.constant(x)}).numpy().reshape(-1)
    expected = float(tf.keras.losses.BinaryFocalCrossentropy()(y.reshape(-1, 1).astype(np.float32), p.reshape(-1, 1)))
    assert figures["loss"] == pytest.approx(expected, rel=1e-5)
    assert figures["precision"] == pytest.approx(float(((p > 0.5) & (y == 1)).sum() / (p > 0.5).sum()), rel=1e-6)
    assert figures["accuracy"] == pytest.approx(float(((p > 0.5) == (y == 1)).mean()), rel=1e-6)
    plain = split_metrics(logistic(), files, SPEC, "none", 16)
    assert set(plain) == {"loss", "accuracy", "auc"}
    assert plain["loss"] == pytest.approx(float(tf.keras.losses.BinaryCrossentropy()(y.reshape(-1, 1).astype(np.float32),
                                                                                     p.reshape(-1, 1))), rel=1e-5)


def test_a_sweep_of_the_learning_rate_is_refused_for_a_model_that_compiles_itself(tmp_path, monkeypatch):
    from tfos_jobs.config import sweep as sweep_file

    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    sweep = sweep_file.load(ROOT / "conf" / "sweep.toml", [f"sweep.dir={tmp_path}/s"])
    assert "train.learning_rate" in [p.key for p in sweep.params]
    with pytest.raises(ConfigError, match=r"^train.model.kind: mymodels:build_focal compiles its model itself \(loss "
                                          r"focal; .*\), so the sweep's train.learning_rate would change nothing"):
        api.check_sweep(config=config.load(CENSUS, ["train.model.kind=mymodels:build_focal"]), space=sweep)
