"""Keras layers of the package's own (TensorFlow imported at module load: import it lazily)."""
from __future__ import annotations

from typing import Sequence

import tensorflow as tf

COMBINERS = ("sum", "concat")


@tf.keras.utils.register_keras_serializable(package="tfos")
class SharedEmbedding(tf.keras.layers.Layer):
    """Several embedding tables of one width kept in one variable, feature i in rows
    `offsets[i] : offsets[i] + sizes[i]`.

    The model computes exactly what one table per feature computes (every row is looked up,
    initialised and updated on its own), but a training step moves one variable instead of
    one per feature: one gradient in MultiWorkerMirrored's all-reduce, one read and one update
    per parameter-server round trip instead of a dozen.

    Called on a list of int id tensors of shape [batch] (one per feature, in `sizes` order);
    returns [batch, dim] summed over the features ("sum", a linear model's term) or
    [batch, len(sizes) * dim] side by side ("concat", embeddings feeding a dense network).
    """

    def __init__(self, sizes: Sequence[int], dim: int, combiner: str = "concat",
                 embeddings_initializer: str = "uniform", **kwargs):
        super().__init__(**kwargs)
        if combiner not in COMBINERS:
            raise ValueError(f"combiner must be one of {COMBINERS}, got {combiner!r}")
        if not sizes or min(sizes) < 1:
            raise ValueError(f"every table needs at least one row, got sizes {list(sizes)}")
        self.sizes = [int(s) for s in sizes]
        self.dim = int(dim)
        self.combiner = combiner
        self.embeddings_initializer = tf.keras.initializers.get(embeddings_initializer)
        self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]

    @property
    def rows(self) -> int:
        return sum(self.sizes)

    def build(self, input_shape) -> None:
        self.embeddings = self.add_weight(name="embeddings", shape=(self.rows, self.dim),
                                          initializer=self.embeddings_initializer, trainable=True)
        super().build(input_shape)

    def call(self, ids: Sequence[tf.Tensor]) -> tf.Tensor:
        rows = tf.stack([tf.cast(x, tf.int64) + offset for x, offset in zip(ids, self.offsets)], axis=1)
        vectors = tf.gather(self.embeddings, rows)  # [batch, features, dim]
        if self.combiner == "sum":
            return tf.reduce_sum(vectors, axis=1)
        return tf.reshape(vectors, [-1, len(self.sizes) * self.dim])

    def get_config(self) -> dict:
        return {**super().get_config(), "sizes": self.sizes, "dim": self.dim, "combiner": self.combiner,
                "embeddings_initializer": tf.keras.initializers.serialize(self.embeddings_initializer)}


@tf.keras.utils.register_keras_serializable(package="tfos")
class ReconstructionError(tf.keras.layers.Layer):
    """Mean squared difference per window between a reconstruction and its target, both
    [batch, steps, sensors]: the autoencoder's training loss and its anomaly score."""

    def call(self, inputs: Sequence[tf.Tensor]) -> tf.Tensor:
        reconstruction, target = inputs
        return tf.reduce_mean(tf.math.squared_difference(reconstruction, target), axis=[1, 2])
