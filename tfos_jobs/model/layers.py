"""Keras layers of the package's own (TensorFlow imported at module load: import it lazily)."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

COMBINERS = ("sum", "concat")


@tf.keras.utils.register_keras_serializable(package="tfos")
class SharedEmbedding(tf.keras.layers.Layer):
    """Several embedding tables of one width kept in one variable, feature i in rows
    `offsets[i] : offsets[i] + sizes[i]`.

    The model computes exactly what one table per feature computes (every row is looked up, initialised and updated on
    its own), but a training step moves one variable instead of one per feature: one gradient in MultiWorkerMirrored's
    all-reduce, one read and one update per parameter-server round trip instead of a dozen.

    Called on a list of int id tensors of shape [batch] (one per feature, in `sizes` order); returns [batch, dim] summed
    over the features ("sum", a linear model's term) or [batch, len(sizes) * dim] side by side ("concat", embeddings
    feeding a dense network)."""

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
class EmbeddingBag(tf.keras.layers.Layer):
    """A row's several ids ([batch, width] int, 0 where there is none: `features.text.PAD`) as one [batch, dim] vector,
    the mean or the sum of their embeddings; a row without ids gets zeros. A text's tokens, a list's elements; with
    `embeddings_initializer` "zeros" and `dim` the output units, the wide part's weights of a cross with a bag."""

    def __init__(self, size: int, dim: int, combiner: str = "mean", embeddings_initializer: str = "uniform", **kwargs):
        super().__init__(**kwargs)
        self.size, self.dim, self.combiner = int(size), int(dim), combiner
        self.embeddings_initializer = embeddings_initializer

    def build(self, input_shape) -> None:
        self.embeddings = self.add_weight(name="embeddings", shape=(self.size, self.dim),
                                          initializer=self.embeddings_initializer, trainable=True)
        super().build(input_shape)

    def call(self, ids: tf.Tensor) -> tf.Tensor:
        present = tf.cast(ids > 0, self.compute_dtype)[..., tf.newaxis]  # [batch, width, 1]
        total = tf.reduce_sum(tf.gather(self.embeddings, ids) * present, axis=1)
        return total if self.combiner == "sum" else total / tf.maximum(tf.reduce_sum(present, axis=1), 1.0)

    def get_config(self) -> dict:
        return {**super().get_config(), "size": self.size, "dim": self.dim, "combiner": self.combiner,
                "embeddings_initializer": self.embeddings_initializer}


@tf.keras.utils.register_keras_serializable(package="tfos")
class BagCross(tf.keras.layers.Layer):
    """The cross of a bag's ids ([batch, width], 0 where there is none) with other features' ids ([batch] each): each
    token or element crossed with the row's other values, hashed into `num_bins` as `HashedCrossing` hashes a cross of
    single ids, as [batch, width] ids shifted by one, 0 where the bag has none (what `EmbeddingBag` leaves out)."""

    def __init__(self, num_bins: int, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.num_bins = int(num_bins)

    def call(self, inputs: Sequence[tf.Tensor]) -> tf.Tensor:
        bag, *others = inputs
        bag = tf.cast(bag, tf.int64)
        # One pair a row of [batch * width, 1] columns, crossed by the op `HashedCrossing` calls on [batch, 1] ones.
        pairs = [tf.reshape(x, [-1, 1]) for x in
                 (bag, *(tf.broadcast_to(tf.cast(o, tf.int64)[:, tf.newaxis], tf.shape(bag)) for o in others))]
        crossed = tf.reshape(tf.sparse.to_dense(tf.sparse.cross_hashed(pairs, self.num_bins)), tf.shape(bag))
        return tf.where(bag > 0, crossed + 1, tf.zeros_like(crossed))

    def get_config(self) -> dict:
        return {**super().get_config(), "num_bins": self.num_bins}


@tf.keras.utils.register_keras_serializable(package="tfos")
class Tokenize(tf.keras.layers.Layer):
    """A [batch] string tensor of texts as [batch, width] tokens (`features.text.graph_tokens`): the model takes the raw
    text, so training and every caller of the SavedModel tokenize it the one way."""

    def __init__(self, max_tokens: int, ngrams: int = 1, **kwargs):
        super().__init__(trainable=False, **kwargs)
        self.max_tokens, self.ngrams = int(max_tokens), int(ngrams)

    def call(self, texts: tf.Tensor) -> tf.Tensor:
        from tfos_jobs.features.kinds import TextFeature
        from tfos_jobs.features.text import graph_tokens

        return graph_tokens(texts, TextFeature(self.name, max_tokens=self.max_tokens, ngrams=self.ngrams))

    def get_config(self) -> dict:
        return {**super().get_config(), "max_tokens": self.max_tokens, "ngrams": self.ngrams}


def _glorot(fan_in: int, fan_out: int) -> tf.keras.initializers.Initializer:
    """Glorot-uniform for one feature's [fan_in, fan_out] slice of a stacked kernel (Keras would
    count the stacking dimension into the fans)."""
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return tf.keras.initializers.RandomUniform(-limit, limit)


@tf.keras.utils.register_keras_serializable(package="tfos")
class PeriodicEmbeddings(tf.keras.layers.Layer):
    """Periodic embeddings of several numeric features ("PLR", Gorishniy et al. 2022): per feature, cos and sin of
    2π·c·x for `frequencies` trained coefficients c (started at N(0, `sigma`)), then a ReLU layer of `dim` units of the
    feature's own. They let a plain MLP draw sharp, high-frequency functions of one number (a capital gain above a
    threshold), which it learns poorly from the number itself.

    All features in three variables (coefficients [n, k], kernel [n, 2k, dim], bias [n, dim]). Called on [batch, n]
    floats (normalised values); returns [batch, n * dim]."""

    def __init__(self, features: int, frequencies: int, sigma: float, dim: int, **kwargs):
        super().__init__(**kwargs)
        self.features, self.frequencies, self.sigma, self.dim = int(features), int(frequencies), float(sigma), int(dim)

    def build(self, input_shape) -> None:
        n, k = self.features, self.frequencies
        self.coefficients = self.add_weight(name="coefficients", shape=(n, k), trainable=True,
                                            initializer=tf.keras.initializers.RandomNormal(stddev=self.sigma))
        self.kernel = self.add_weight(name="kernel", shape=(n, 2 * k, self.dim), initializer=_glorot(2 * k, self.dim),
                                      trainable=True)
        self.bias = self.add_weight(name="bias", shape=(n, self.dim), initializer="zeros", trainable=True)
        super().build(input_shape)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        angles = 2 * math.pi * self.coefficients[tf.newaxis] * x[..., tf.newaxis]  # [batch, n, k]
        periodic = tf.concat([tf.cos(angles), tf.sin(angles)], axis=-1)
        hidden = tf.nn.relu(tf.einsum("bnf,nfd->bnd", periodic, self.kernel) + self.bias)
        return tf.reshape(hidden, [-1, self.features * self.dim])

    def get_config(self) -> dict:
        return {**super().get_config(), "features": self.features, "frequencies": self.frequencies,
                "sigma": self.sigma, "dim": self.dim}


@tf.keras.utils.register_keras_serializable(package="tfos")
class PiecewiseLinearEmbeddings(tf.keras.layers.Layer):
    """Piecewise-linear encodings of several numeric features over fixed bins ("PLE", Gorishniy et al. 2022), each
    through a ReLU layer of `dim` units of its own.

    Feature i with edges e_0 < ... < e_T has T bins; bin t holds (x - e_t) / (e_{t+1} - e_t) clipped to [0, 1]: 1 for
    every bin below x, 0 above, the fraction within. The first bin is not clipped below nor the last above, so values
    outside the train range still count. Features with fewer bins than the most are padded with zeros. Called on
    [batch, n] raw values; returns [batch, n * dim]."""

    def __init__(self, edges: Sequence[Sequence[float]], dim: int, **kwargs):
        super().__init__(**kwargs)
        self.edges = [[float(e) for e in feature] for feature in edges]
        if any(len(e) < 2 or list(e) != sorted(set(e)) for e in self.edges):
            raise ValueError(f"bin edges must be at least two strictly increasing values per feature, got {self.edges}")
        self.dim = int(dim)
        n, width = len(self.edges), max(len(e) - 1 for e in self.edges)
        left, span = np.zeros((n, width), np.float32), np.ones((n, width), np.float32)
        low, high = np.zeros((n, width), np.float32), np.zeros((n, width), np.float32)
        for i, e in enumerate(self.edges):
            bins = len(e) - 1
            left[i, :bins] = e[:-1]
            span[i, :bins] = np.diff(np.asarray(e, np.float64))
            high[i, :bins] = 1.0
            low[i, 0], high[i, bins - 1] = -np.inf, np.inf
        self._left, self._span, self._low, self._high = left, span, low, high  # padded bins: clipped to [0, 0]

    def build(self, input_shape) -> None:
        n, width = self._left.shape
        self.kernel = self.add_weight(name="kernel", shape=(n, width, self.dim), initializer=_glorot(width, self.dim),
                                      trainable=True)
        self.bias = self.add_weight(name="bias", shape=(n, self.dim), initializer="zeros", trainable=True)
        super().build(input_shape)

    def encode(self, x: tf.Tensor) -> tf.Tensor:
        """[batch, n] -> [batch, n, bins]: the encoding itself, before the ReLU layer."""
        fraction = (x[..., tf.newaxis] - self._left) / self._span
        return tf.minimum(tf.maximum(fraction, self._low), self._high)

    def call(self, x: tf.Tensor) -> tf.Tensor:
        hidden = tf.nn.relu(tf.einsum("bnf,nfd->bnd", self.encode(x), self.kernel) + self.bias)
        return tf.reshape(hidden, [-1, len(self.edges) * self.dim])

    def get_config(self) -> dict:
        return {**super().get_config(), "edges": self.edges, "dim": self.dim}


@tf.keras.utils.register_keras_serializable(package="tfos")
class ReconstructionError(tf.keras.layers.Layer):
    """Mean squared difference per window between a reconstruction and its target, both
    [batch, steps, sensors]: the autoencoder's training loss and (with `scale`) its anomaly
    score. `scale`: one weight per sensor for its squared differences (`sequence.sensor_scale`)."""

    def __init__(self, scale: Sequence[float] | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.scale = None if scale is None else [float(s) for s in scale]

    def call(self, inputs: Sequence[tf.Tensor]) -> tf.Tensor:
        reconstruction, target = inputs
        squared = tf.math.squared_difference(reconstruction, target)
        if self.scale is not None:
            squared = squared * tf.constant(self.scale, squared.dtype)
        return tf.reduce_mean(squared, axis=[1, 2])

    def get_config(self) -> dict:
        return {**super().get_config(), "scale": self.scale}


@tf.keras.utils.register_keras_serializable(package="tfos")
class WindowScore(tf.keras.layers.Layer):
    """[reconstruction, target, window, rows] -> each window's anomaly score: the mean over its
    steps and sensors of the squared difference between the reconstruction and its (clipped)
    target, weighed per sensor by the window's row of `scale` (`AssetStandardization.rows`: row 0
    the fleet's; None: unweighed). Where the window's value, standardised by its row of `mean` and
    `variance`, lies beyond the `clip`, its error goes on growing past it as
    `2 * clip * log(1 + excess)`, the slope it had there: a reading 300 stds out still ranks above
    one 20 out on the same machine, and neither drowns the rest of its window."""

    def __init__(self, mean: Sequence[Sequence[float]], variance: Sequence[Sequence[float]],
                 scale: Sequence[Sequence[float]] | None = None, clip: float | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.mean = [[float(v) for v in row] for row in mean]
        self.variance = [[float(v) for v in row] for row in variance]
        self.scale = None if scale is None else [[float(v) for v in row] for row in scale]
        self.clip = None if not clip else float(clip)
        if self.scale is not None and len(self.scale) != len(self.mean):
            raise ValueError(f"{len(self.mean)} rows of means need as many rows of sensor weights, got {len(self.scale)}")

    def call(self, inputs: Sequence[tf.Tensor]) -> tf.Tensor:
        reconstruction, target, window, rows = inputs
        squared = tf.math.squared_difference(reconstruction, target)
        if self.clip is not None:
            excess = tf.nn.relu(tf.abs(standardised(window, rows, self.mean, self.variance)) - self.clip)
            squared = squared + 2.0 * self.clip * tf.math.log1p(excess)
        if self.scale is not None:
            squared = squared * tf.gather(tf.constant(self.scale, squared.dtype), rows)[:, tf.newaxis, :]
        return tf.reduce_mean(squared, axis=[1, 2])

    def get_config(self) -> dict:
        return {**super().get_config(), "mean": self.mean, "variance": self.variance, "scale": self.scale,
                "clip": self.clip}


def standardised(x: tf.Tensor, rows: tf.Tensor, mean: Sequence[Sequence[float]],
                 variance: Sequence[Sequence[float]]) -> tf.Tensor:
    """[batch, steps, sensors] windows standardised by their `rows` of `mean` and `variance`."""
    mean_at = tf.gather(tf.constant(mean, x.dtype), rows)[:, tf.newaxis, :]
    std_at = tf.sqrt(tf.maximum(tf.gather(tf.constant(variance, x.dtype), rows), 1e-7))[:, tf.newaxis, :]
    return (x - mean_at) / std_at


@tf.keras.utils.register_keras_serializable(package="tfos")
class AssetStandardization(tf.keras.layers.Layer):
    """[window, key] -> the [batch, steps, sensors] window standardised by its asset's means and
    variances, clipped to +-`clip` (None: not clipped). Row 0 of `mean` and `variance` is the fleet's,
    for a key not among `assets` (`rows`); row 1 + i is `assets[i]`'s. Without assets every window
    takes the fleet's row."""

    def __init__(self, assets: Sequence[str], mean: Sequence[Sequence[float]], variance: Sequence[Sequence[float]],
                 clip: float | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.clip = None if clip is None else float(clip)
        self.assets = [str(a) for a in assets]
        self.mean = [[float(v) for v in row] for row in mean]
        self.variance = [[float(v) for v in row] for row in variance]
        if len(self.mean) != len(self.assets) + 1 or len(self.variance) != len(self.mean):
            raise ValueError(f"{len(self.assets)} assets need {len(self.assets) + 1} rows of means and variances "
                             f"(the fleet's first), got {len(self.mean)} and {len(self.variance)}")
        self._lookup = tf.keras.layers.StringLookup(vocabulary=self.assets, num_oov_indices=1) if self.assets else None

    def rows(self, key: tf.Tensor) -> tf.Tensor:
        """Each key's row of per-asset constants: 0 for an asset not seen in training."""
        key = tf.reshape(key, [-1])
        return tf.zeros_like(key, tf.int64) if self._lookup is None else self._lookup(key)

    def call(self, inputs: Sequence[tf.Tensor]) -> tf.Tensor:
        x, key = inputs
        standard = standardised(x, self.rows(key), self.mean, self.variance)
        return standard if self.clip is None else tf.clip_by_value(standard, -self.clip, self.clip)

    def get_config(self) -> dict:
        return {**super().get_config(), "assets": self.assets, "mean": self.mean, "variance": self.variance,
                "clip": self.clip}
