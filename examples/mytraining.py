"""Training functions of your own: `fn(ctx)` runs on every TF node in place of the package's build, fit and export.

    tfos train --config census --set train.fn=mytraining:fit        # Keras's fit with the package's callbacks
    tfos train --config census --set train.fn=mytraining:loop       # a custom loop with tf.GradientTape

run from this directory (or with it on PYTHONPATH): the package ships this file to the executors. What `ctx` holds is
in docs/training.md ("Your own training function"). Both train a binary label's classifier over the spec's numeric
and categorical columns; their settings come from `[train.model.params]` (`ctx.params`).
"""
from __future__ import annotations

from typing import Any

import tensorflow as tf

DEFAULTS: dict[str, Any] = {"units": 32, "embedding_dim": 8, "learning_rate": 0.01}


def classifier(spec, vocab, stats, params) -> tf.keras.Model:
    """Standardised numeric columns and embedded categorical ones, one hidden layer, one sigmoid: a model over the
    spec's columns, so `ctx.export` exports it as the package's own (served by name in SQL)."""
    inputs = {f.name: tf.keras.Input(shape=(), dtype=spec.input_dtype(f.name), name=f.name)
              for f in (*spec.numeric, *spec.categorical)}
    parts = []
    for f in spec.numeric:
        mean, std = stats[f.name]["mean"], stats[f.name]["std"] or 1.0
        column = tf.keras.layers.Reshape((1,))(inputs[f.name])
        parts.append(tf.keras.layers.Normalization(mean=mean, variance=std * std)(column))
    for f in spec.categorical:
        ids = tf.keras.layers.StringLookup(vocabulary=vocab[f.name], num_oov_indices=1)(inputs[f.name])
        parts.append(tf.keras.layers.Embedding(len(vocab[f.name]) + 1, int(params["embedding_dim"]))(ids))
    hidden = tf.keras.layers.Dense(int(params["units"]), activation="relu")(tf.keras.layers.Concatenate()(parts))
    return tf.keras.Model(inputs, tf.keras.layers.Dense(1, activation="sigmoid")(hidden))


def fit(ctx) -> None:
    """Keras's fit: the callbacks report each epoch to the driver, checkpoint every train.checkpoint_steps steps and
    resume a relaunched run where the last one stopped."""
    params = {**DEFAULTS, **ctx.params}
    with ctx.strategy.scope():
        model = classifier(ctx.spec, ctx.vocab, ctx.stats, params)
        model.compile(optimizer=tf.keras.optimizers.Adam(float(params["learning_rate"])), loss="binary_crossentropy",
                      metrics=[tf.keras.metrics.AUC(name="auc")], steps_per_execution=10)
    model.fit(ctx.dataset("train"), epochs=ctx.epochs, steps_per_epoch=ctx.steps_per_epoch,
              validation_data=ctx.dataset("eval"), validation_steps=ctx.validation_steps, callbacks=ctx.callbacks(),
              verbose=0)
    ctx.export(model)


def loop(ctx) -> None:
    """A custom loop: each step's gradients taken with tf.GradientTape and summed across the workers by the strategy
    (under parameter_server, each step run on a free worker, as the coordinator schedules it); `ctx.loop` reports the steps and epochs, checkpoints the model, the optimizer and the position, and resumes a
    relaunched run there (this worker's data skipped to the same place)."""
    params = {**DEFAULTS, **ctx.params}
    strategy = ctx.strategy
    with strategy.scope():
        model = classifier(ctx.spec, ctx.vocab, ctx.stats, params)
        optimizer = tf.keras.optimizers.Adam(float(params["learning_rate"]))
    progress = ctx.loop(model=model, optimizer=optimizer)
    batches = progress.batches(ctx.dataset("train"))  # the strategy's distributed iterator (each worker's, under PS)

    @tf.function
    def step(iterator):
        def replica(features, label):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(  # over the global batch: the strategy sums the replicas' gradients
                    tf.keras.losses.binary_crossentropy(tf.reshape(label, (-1, 1)), model(features, training=True)))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica, args=next(iterator)), axis=None)

    for _ in progress.epochs():
        for _ in progress.steps():
            progress.record(loss=progress.schedule(step, batches))  # a call, or under PS a step on a free worker
        progress.end_epoch(val_auc=evaluate(model, ctx.dataset("eval"), ctx.validation_steps))
    ctx.export(model)


def evaluate(model: tf.keras.Model, dataset, steps: int) -> float:
    """The AUC over the whole eval split (every worker holds all of it)."""
    auc = tf.keras.metrics.AUC()
    for features, label in dataset.take(steps):
        auc.update_state(tf.reshape(label, (-1, 1)), model(features, training=False))
    return float(auc.result())
