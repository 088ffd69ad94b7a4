"""A two-tower model (a dual encoder) with its own contrastive loss, trained on the Tate collection (conf/tate.toml):
an artwork's title and medium (the query tower) against its subject tags and art movements (the candidate tower). Each
row's pair is a positive and the batch's other rows are its negatives (an in-batch softmax both ways, as retrieval and
CLIP-style models train); the label column (the period) is not used.

    tfos prepare --config conf/tate.toml
    PYTHONPATH=examples tfos train --config conf/tate.toml --set train.fn=two_tower:fit    # Keras fit, its train_step
    PYTHONPATH=examples tfos train --config conf/tate.toml --set train.fn=two_tower:loop   # tf.GradientTape, ctx.loop

`fit` trains under multi_worker_mirrored, parameter_server and local; `loop` under all three too (under
parameter_server its steps are scheduled on the workers by the chief's coordinator, `ctx.loop`'s `schedule`). The
export's serving signature scores pairs:

    from udfs import register
    register(spark, "match", "demo-output/tate/model", signature="serving_default")
    spark.sql("SELECT match(struct(title, medium, array_join(subjects, '|') AS subjects, "
              "array_join(movements, '|') AS movements)) AS m FROM artworks")

(the inputs by name, in a struct; given as separate arguments they go in the signature's order, by name: medium,
movements, subjects, title) gives `m.score` (the cosine of the two embeddings) and the embeddings `m.query` and `m.candidate`. Settings come from
`[train.model.params]` (`ctx.params`): `DEFAULTS`.
"""
from __future__ import annotations

from typing import Any, Mapping

import tensorflow as tf

from tfos_jobs.features.text import PAD
from tfos_jobs.model.layers import EmbeddingBag, Tokenize

QUERY = ("title", "medium")  # texts
CANDIDATE = ("subjects", "movements")  # lists
SEPARATOR = "|"  # what joins a list's elements in the serving signature's argument
DEFAULTS: dict[str, Any] = {"embedding_dim": 32, "units": 64, "output_dim": 32, "temperature": 0.1,
                            "learning_rate": 0.003}


def tower(spec, vocab: Mapping[str, list[str]], columns: tuple[str, ...], params: Mapping[str, Any],
          name: str) -> tf.keras.Model:
    """Each column's tokens (a text's words, a list's elements) embedded and averaged, one hidden layer, a unit vector:
    the inputs are the raw strings, so serving tokenizes as training did."""
    inputs, bags = {}, []
    for column in columns:
        f = spec.get(column)
        if f.kind == "text":
            inputs[column] = tf.keras.Input(shape=(), dtype=tf.string, name=column)
            tokens = Tokenize(f.max_tokens, f.ngrams, name=f"{column}_tokens")(inputs[column])
        else:
            inputs[column] = tf.keras.Input(shape=(f.max_length,), dtype=tf.string, name=column)
            tokens = inputs[column]
        ids = tf.keras.layers.StringLookup(vocabulary=vocab[column], mask_token=PAD)(tokens)  # 0: none, 1: unseen
        bags.append(EmbeddingBag(len(vocab[column]) + 2, int(params["embedding_dim"]))(ids))
    hidden = tf.keras.layers.Dense(int(params["units"]), activation="relu")(tf.keras.layers.Concatenate()(bags))
    embedding = tf.keras.layers.UnitNormalization()(tf.keras.layers.Dense(int(params["output_dim"]))(hidden))
    return tf.keras.Model(inputs, embedding, name=name)


def contrastive_loss(query: tf.Tensor, candidate: tf.Tensor, temperature: float) -> tuple[tf.Tensor, tf.Tensor]:
    """Per row: the cross-entropy of picking its own candidate among the batch's, and its own query among the batch's
    (averaged); and whether the top candidate was its own (in-batch top-1)."""
    logits = tf.matmul(query, candidate, transpose_b=True) / temperature
    own = tf.range(tf.shape(logits)[0])
    loss = (tf.nn.sparse_softmax_cross_entropy_with_logits(own, logits)
            + tf.nn.sparse_softmax_cross_entropy_with_logits(own, tf.transpose(logits))) / 2.0
    top1 = tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), own), tf.float32)
    return loss, top1


class TwoTower(tf.keras.Model):
    """The two towers, trained by its own `train_step` (a model with no label: the pairs are the supervision)."""

    def __init__(self, query: tf.keras.Model, candidate: tf.keras.Model, temperature: float):
        super().__init__()
        self.query, self.candidate, self.temperature = query, candidate, float(temperature)
        self.loss_mean = tf.keras.metrics.Mean(name="loss")
        self.top1 = tf.keras.metrics.Mean(name="top1")

    def call(self, features: Mapping[str, tf.Tensor], training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        return (self.query({c: features[c] for c in QUERY}, training=training),
                self.candidate({c: features[c] for c in CANDIDATE}, training=training))

    def losses_of(self, features: Mapping[str, tf.Tensor], training: bool) -> tuple[tf.Tensor, tf.Tensor]:
        return contrastive_loss(*self(features, training=training), self.temperature)

    @property
    def metrics(self) -> list:
        return [self.loss_mean, self.top1]

    def train_step(self, data):
        features, _ = data
        with tf.GradientTape() as tape:
            loss, top1 = self.losses_of(features, training=True)
            scaled = tf.nn.compute_average_loss(loss)  # over the global batch: the strategy sums the replicas' gradients
        self.optimizer.apply_gradients(zip(tape.gradient(scaled, self.trainable_variables), self.trainable_variables))
        return self._track(loss, top1)

    def test_step(self, data):
        features, _ = data
        return self._track(*self.losses_of(features, training=False))

    def _track(self, loss: tf.Tensor, top1: tf.Tensor) -> dict[str, tf.Tensor]:
        self.loss_mean.update_state(loss)
        self.top1.update_state(top1)
        return {m.name: m.result() for m in self.metrics}


def two_tower(ctx, params: Mapping[str, Any]) -> TwoTower:
    """The model, built (called on a row of empty strings): fit's checkpoints need its variables before it starts."""
    model = TwoTower(tower(ctx.spec, ctx.vocab, QUERY, params, "query"),
                     tower(ctx.spec, ctx.vocab, CANDIDATE, params, "candidate"), float(params["temperature"]))
    model({**{c: tf.constant([PAD]) for c in QUERY},
           **{c: tf.fill([1, ctx.spec.get(c).max_length], PAD) for c in CANDIDATE}})
    return model


class Matcher(tf.Module):
    """What is exported: both towers and the serving signature, which takes a list's elements joined by `SEPARATOR`
    (a SQL argument per row: `array_join(subjects, '|')`)."""

    def __init__(self, model: TwoTower, widths: Mapping[str, int]):
        super().__init__()
        self.query, self.candidate, self.widths = model.query, model.candidate, dict(widths)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=c) for c in (*QUERY, *CANDIDATE)])
    def serve(self, title, medium, subjects, movements):
        lists = {c: tf.strings.split(joined, SEPARATOR).to_tensor(default_value=PAD, shape=[None, self.widths[c]])
                 for c, joined in (("subjects", subjects), ("movements", movements))}
        query = self.query({"title": title, "medium": medium})
        candidate = self.candidate(lists)
        return {"score": tf.reduce_sum(query * candidate, axis=1), "query": query, "candidate": candidate}


def export(ctx, model: TwoTower) -> None:
    matcher = Matcher(model, {c: ctx.spec.get(c).max_length for c in CANDIDATE})
    ctx.export(matcher, signatures={"serving_default": matcher.serve})


def fit(ctx) -> None:
    """Keras's fit with the model's own train_step; the callbacks report each epoch to the driver, checkpoint every
    train.checkpoint_steps steps (under parameter_server: every epoch) and resume a relaunched run there."""
    params = {**DEFAULTS, **ctx.params}
    with ctx.strategy.scope():
        model = two_tower(ctx, params)
        model.compile(optimizer=tf.keras.optimizers.Adam(float(params["learning_rate"])), steps_per_execution=10)
    model.fit(ctx.dataset("train"), epochs=ctx.epochs, steps_per_epoch=ctx.steps_per_epoch,
              validation_data=ctx.dataset("eval"), validation_steps=ctx.validation_steps, callbacks=ctx.callbacks(),
              verbose=0)
    export(ctx, model)


def loop(ctx) -> None:
    """A custom loop: each step's gradients taken with tf.GradientTape, the replicas' summed by the strategy (under
    parameter_server, each step scheduled on a worker by the coordinator); `ctx.loop` reports the steps and epochs,
    checkpoints the model, the optimizer and the position, and resumes a relaunched run there."""
    params = {**DEFAULTS, **ctx.params}
    strategy = ctx.strategy
    with strategy.scope():
        model = two_tower(ctx, params)
        optimizer = tf.keras.optimizers.Adam(float(params["learning_rate"]))
    progress = ctx.loop(model=model, optimizer=optimizer)
    batches = progress.batches(ctx.dataset("train"))

    @tf.function
    def step(iterator):
        def replica(features, label):
            with tf.GradientTape() as tape:
                loss, _ = model.losses_of(features, training=True)
                scaled = tf.nn.compute_average_loss(loss)
            optimizer.apply_gradients(zip(tape.gradient(scaled, model.trainable_variables), model.trainable_variables))
            return scaled

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica, args=next(iterator)), axis=None)

    for _ in progress.epochs():
        for _ in progress.steps():
            progress.record(loss=progress.schedule(step, batches))
        progress.end_epoch(**evaluate(model, ctx.dataset("eval"), ctx.validation_steps))
    export(ctx, model)


def evaluate(model: TwoTower, dataset, steps: int) -> dict[str, float]:
    """The contrastive loss and the in-batch top-1 over the whole eval split (every worker holds all of it)."""
    loss, top1 = tf.keras.metrics.Mean(), tf.keras.metrics.Mean()
    for features, _ in dataset.take(steps):
        batch_loss, batch_top1 = model.losses_of(features, training=False)
        loss.update_state(batch_loss)
        top1.update_state(batch_top1)
    return {"val_loss": float(loss.result()), "val_top1": float(top1.result())}
