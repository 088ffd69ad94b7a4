"""The training steps used under distribution (model/steps.py). TensorFlow only, no Spark.

Two replicas in one process (MirroredStrategy over two logical CPUs) stand in for two
workers: the metrics Keras reports at the end of an epoch must be those of all the data,
although each step returns only its own replica's values."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf

from tfos_jobs.model import steps


def small_model() -> tf.keras.Model:
    x = tf.keras.Input(shape=(), dtype="int64", name="id")
    e = tf.keras.layers.Embedding(50, 4)(x)
    out = tf.keras.layers.Dense(1, activation="sigmoid")(e)
    return tf.keras.Model(x, out)


def test_densify_turns_small_sparse_gradients_dense_only():
    small, big = tf.Variable(tf.zeros([10, 2])), tf.Variable(tf.zeros([1000, 2]))
    dense_var = tf.Variable(tf.zeros([3]))
    sparse = tf.IndexedSlices(tf.ones([2, 2]), tf.constant([1, 1]), tf.constant([10, 2]))
    big_sparse = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([7]), tf.constant([1000, 2]))
    out = steps.densify([sparse, big_sparse, tf.ones([3])], [small, big, dense_var], limit=20)
    assert isinstance(out[0], tf.Tensor) and out[0].numpy()[1].tolist() == [2.0, 2.0]  # repeated ids summed
    assert isinstance(out[1], tf.IndexedSlices)
    assert out[2].numpy().tolist() == [1.0, 1.0, 1.0]
    assert isinstance(steps.densify([sparse], [small], limit=0)[0], tf.IndexedSlices)


def test_wrap_shares_the_model_and_a_subclassed_model_stays_as_it_is():
    model = small_model()
    wrapped = steps.wrap(model, 100)
    assert isinstance(wrapped, steps.StepModel) and wrapped.dense_gradient_limit == 100
    assert [id(v) for v in wrapped.trainable_variables] == [id(v) for v in model.trainable_variables]
    ids = np.arange(5, dtype=np.int64)
    np.testing.assert_array_equal(wrapped(ids).numpy(), model(ids).numpy())

    class Sub(tf.keras.Model):
        def call(self, x):
            return x

    sub = Sub()
    assert steps.wrap(sub, 100) is sub


def test_local_result_is_the_metric_value_without_a_strategy():
    auc = tf.keras.metrics.AUC()
    auc.update_state([0, 1, 1, 0], [0.1, 0.8, 0.6, 0.7])
    assert float(steps.local_result(auc)) == float(auc.result())


def test_two_replicas_report_the_metrics_of_all_the_data():
    script = textwrap.dedent("""
        import os, json
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import numpy as np, tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from tfos_jobs.model import steps
        rng = np.random.default_rng(0)
        ids = rng.integers(0, 50, 4096).astype(np.int64)
        y = ((ids % 3 == 0) ^ (rng.random(4096) < 0.1)).astype(np.float32)
        def build():
            x = tf.keras.Input(shape=(), dtype="int64", name="id")
            out = tf.keras.layers.Dense(1, activation="sigmoid")(tf.keras.layers.Embedding(50, 4)(x))
            return tf.keras.Model(x, out)
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            model = steps.wrap(build(), 1000)
            model.compile(optimizer="adam", loss="binary_crossentropy",
                          metrics=[tf.keras.metrics.AUC(name="auc")], steps_per_execution=4)
        data = tf.data.Dataset.from_tensor_slices((ids, y)).batch(256)
        history = model.fit(data, epochs=3, verbose=0)
        distributed = model.evaluate(data, verbose=0, return_dict=True)
        plain = build()
        plain.set_weights(model.get_weights())
        plain.compile(loss="binary_crossentropy", metrics=[tf.keras.metrics.AUC(name="auc")])
        single = plain.evaluate(data, verbose=0, return_dict=True)
        print(json.dumps({"distributed": distributed, "single": single, "loss": history.history["loss"]}))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["loss"][-1] < out["loss"][0]  # it trained, with dense gradients of the embedding
    assert abs(out["distributed"]["auc"] - out["single"]["auc"]) < 1e-4
    assert abs(out["distributed"]["loss"] - out["single"]["loss"]) < 1e-4
    assert out["single"]["auc"] > 0.8
