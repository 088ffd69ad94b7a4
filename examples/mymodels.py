"""A model of your own: a Deep & Cross network (Wang et al., "DCN V2", 2021) over the feature spec.

Train it with `train.model.kind = "mymodels:build"` and its settings in `[train.model.params]`:

    tfos train --config census --set train.model.kind=mymodels:build \
        --set train.model.params.cross_layers=3 --set 'train.model.params.deep_units=[64, 32]'

run from this directory (or with it on PYTHONPATH): the package ships this file to the executors.
The contract `build` follows is in docs/training.md ("Your own model").
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfos_jobs.config import ModelConfig
from tfos_jobs.features.spec import FeatureSpec

DEFAULTS: dict[str, Any] = {"cross_layers": 2, "deep_units": (64, 32), "embedding_dim": 8}


def build(spec: FeatureSpec, vocab: dict[str, list[str]], stats: dict[str, Any],
          model_cfg: ModelConfig) -> tf.keras.Model:
    """Embeddings of the categorical columns and standardised numeric ones, `cross_layers`
    cross layers beside a deep tower of `deep_units`, one sigmoid (binary), softmax
    (multiclass) or linear (regression) output. Uncompiled: training compiles it."""
    params = {**DEFAULTS, **model_cfg.params}
    inputs = {n: tf.keras.Input(shape=(), dtype=spec.input_dtype(n), name=n) for n in spec.model_inputs}
    parts = []
    for f in spec.numeric:
        mean, std = stats[f.name]["mean"], stats[f.name]["std"] or 1.0
        column = tf.keras.layers.Reshape((1,), name=f"{f.name}_column")(inputs[f.name])
        parts.append(tf.keras.layers.Normalization(mean=mean, variance=std * std, name=f"{f.name}_norm")(column))
    for f in spec.categorical:
        ids = tf.keras.layers.StringLookup(vocabulary=vocab[f.name], num_oov_indices=f.num_oov_buckets,
                                           name=f"{f.name}_ids")(inputs[f.name])
        size = len(vocab[f.name]) + f.num_oov_buckets
        parts.append(tf.keras.layers.Embedding(size, int(params["embedding_dim"]), name=f"{f.name}_embedding")(ids))
    x0 = tf.keras.layers.Concatenate(name="features")(parts)
    crossed = x0
    for i in range(int(params["cross_layers"])):  # x_{l+1} = x0 * (W x_l + b) + x_l
        projected = tf.keras.layers.Dense(x0.shape[-1], name=f"cross_{i}")(crossed)
        crossed = tf.keras.layers.Add(name=f"cross_{i}_residual")(
            [tf.keras.layers.Multiply(name=f"cross_{i}_product")([x0, projected]), crossed])
    deep = x0
    for i, units in enumerate(params["deep_units"]):
        deep = tf.keras.layers.Dense(int(units), activation="relu", name=f"deep_{i}")(deep)
    both = tf.keras.layers.Concatenate(name="cross_and_deep")([crossed, deep])
    task = spec.label.task
    units = len(spec.label.classes) if task == "multiclass" else 1
    activation = {"binary": "sigmoid", "multiclass": "softmax"}.get(task, "linear")
    output = tf.keras.layers.Dense(units, activation=activation, name="output")(both)
    return tf.keras.Model(inputs, output, name="deep_cross")


def build_focal(spec: FeatureSpec, vocab: dict[str, list[str]], stats: dict[str, Any],
                model_cfg: ModelConfig) -> tf.keras.Model:
    """The same network, compiled here: a focal loss (Lin et al., 2017), which weighs the examples the model
    still gets wrong, for a rare positive class; its own optimizer and metrics. Training keeps this compile
    (`train.optimizer` and `train.learning_rate` are then not used). `[train.model.params]`: `gamma` (2.0),
    `learning_rate` (0.002), and `build`'s."""
    if spec.label.task != "binary":
        raise ValueError(f"build_focal is for a binary label; {spec.label.name} is {spec.label.task}")
    model = build(spec, vocab, stats, model_cfg)
    params = model_cfg.params
    model.compile(optimizer=tf.keras.optimizers.Adam(float(params.get("learning_rate", 0.002))),
                  loss=tf.keras.losses.BinaryFocalCrossentropy(gamma=float(params.get("gamma", 2.0)), name="focal"),
                  metrics=[tf.keras.metrics.AUC(name="auc"), tf.keras.metrics.Precision(name="precision"),
                           tf.keras.metrics.Recall(name="recall")])
    return model


class ClippedSteps(tf.keras.Model):
    """A model with a training step of its own: gradients clipped to a global norm of `clip_norm` before they are
    applied, and that norm reported with the step's logs (`grad_norm`). Training runs this step as it is."""

    clip_norm = 1.0

    def train_step(self, data):
        x, y = data[0], data[1]
        with tf.GradientTape() as tape:
            predicted = self(x, training=True)
            loss = self.compute_loss(x, y, predicted)
        gradients = tape.gradient(loss, self.trainable_variables)
        clipped, norm = tf.clip_by_global_norm(gradients, self.clip_norm)
        self.optimizer.apply_gradients(zip(clipped, self.trainable_variables))
        logs = self.compute_metrics(x, y, predicted, None)
        return {**logs, "grad_norm": norm}


def build_clipped(spec: FeatureSpec, vocab: dict[str, list[str]], stats: dict[str, Any],
                  model_cfg: ModelConfig) -> tf.keras.Model:
    """`build`'s network as a `ClippedSteps` model, compiled here with the label's usual loss (binary)."""
    plain = build(spec, vocab, stats, model_cfg)
    model = ClippedSteps(plain.inputs, plain.outputs, name="deep_cross_clipped")
    model.clip_norm = float(model_cfg.params.get("clip_norm", 1.0))
    model.compile(optimizer=tf.keras.optimizers.Adam(0.002), loss=tf.keras.losses.BinaryCrossentropy(),
                  metrics=[tf.keras.metrics.AUC(name="auc")])
    return model
