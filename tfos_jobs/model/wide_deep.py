"""Wide & deep, as the census DNNLinearCombinedClassifier, from the feature spec.

One set of layers, called two ways:
  * `model()`: the Keras model over the raw columns (a dict of 1-D tensors, as `data.reader`
    yields them), which trains and whose `serving_default` takes raw columns;
  * `from_codes()`: the same layers over a batch whose categorical columns arrive as their
    distinct values plus one code per row, as the prediction UDF holds them. Each vocabulary
    lookup then runs on the distinct values only, and each cross on the distinct combinations
    of its components' ids; the ids of every row are gathered from those. The outputs are the
    model's own, bit for bit: only the number of rows each op touches changes.

Imports TensorFlow at module load: import it where TensorFlow is already wanted.
"""
from __future__ import annotations

import math
from typing import Any, cast

import tensorflow as tf

from tfos_jobs.config import ModelConfig
from tfos_jobs.contracts.serving import MODEL_OUTPUT
from tfos_jobs.features.spec import (BucketizedFeature, CategoricalFeature, CrossedFeature, Feature, FeatureSpec,
                                     NumericEncoding, NumericFeature, TextFeature)
from tfos_jobs.features.text import PAD
from tfos_jobs.contracts.dataset import STATS, STATS_BINS
from tfos_jobs.model.layers import (BagCross, EmbeddingBag, PeriodicEmbeddings, PiecewiseLinearEmbeddings,
                                   SharedEmbedding, Tokenize)
from tfos_jobs.tasks import ModelKind, Task

ATTRIBUTE = "tfos_wide_deep"  # the WideDeep behind a Keras model `model()` built
_COMBINATIONS = 2**62  # a cross of fewer id combinations than this is computed on the distinct ones


class WideDeep:
    """The layers of the model and the two ways through them.

    Wide: a linear model (one weight per id and output unit) over the categorical, bucketized and crossed features.
    Deep: embeddings of the categoricals and the numerics (normalised, or embedded by their `encoding`:
    `model.layers.PeriodicEmbeddings`, `PiecewiseLinearEmbeddings`) through `model_cfg.hidden_units()` ReLU layers. The
    two logits are added.

    Texts and lists enter the deep part as bags (`EmbeddingBag`: the mean or sum of their tokens' or elements'
    embeddings), vectors as they are. A cross that names a text or a list crosses each of its tokens or elements with
    the row's other values (`BagCross`); the wide part sums the weights of those ids. The id tables are few variables, not one per feature (`SharedEmbedding`): all
    wide weights in one, the deep embeddings in one per embedding width (a bag has its own). A distributed step's cost grows with the number of variables it moves, not
    with their size, at this model's scale."""

    def __init__(self, spec: FeatureSpec, vocab: dict[str, list[str]], stats: dict[str, Any],
                 model_cfg: ModelConfig, units: int):
        layers = tf.keras.layers
        self.spec = spec
        self.categorical = list(spec.categorical)  # the order of from_codes' inputs (contracts.serving)
        self.numeric = list(spec.numeric)
        self.bucketized = [f for f in spec.features if isinstance(f, BucketizedFeature)]
        self.crossed: list[CrossedFeature] = list(spec.of_kind("crossed"))
        self.lookup: dict[str, Any] = {}
        self.bucketize: dict[str, Any] = {}
        self.normalize, self.reshape = {}, {}
        self.cross: dict[str, Any] = {}
        self.sizes: dict[str, int] = {}  # per categorical, bucketized and crossed feature: how many ids
        f: Feature  # each loop below goes over one kind of feature, or all of them
        for f in self.numeric:
            if f.normalize and f.encoding != NumericEncoding.PIECEWISE_LINEAR:  # bins are in the column's own units
                mean, variance = _moments(stats, f.name)
                self.normalize[f.name] = layers.Normalization(axis=None, mean=mean, variance=variance,
                                                              name=f"norm_{f.name}")
            self.reshape[f.name] = layers.Reshape((1,), name=f"col_{f.name}")
        # Embedded numerics: one layer per encoding and settings (few variables: see SharedEmbedding).
        self.embedded: dict[tuple, list[str]] = {}
        for f in self.numeric:
            if f.encoding != NumericEncoding.LINEAR:
                self.embedded.setdefault(f.encoding_key(), []).append(f.name)
        self.embed_numeric, self.side_by_side = {}, {}
        for i, (group, names) in enumerate(self.embedded.items()):
            if len(names) > 1:
                self.side_by_side[group] = layers.Concatenate(axis=1, name=f"numeric_{i}")
            f = cast(NumericFeature, spec.get(names[0]))  # the group's settings: the names are self.numeric's
            self.embed_numeric[group] = (
                PeriodicEmbeddings(len(names), f.frequencies, f.sigma, f.embedding_dim, name=f"periodic_{i}")
                if f.encoding == NumericEncoding.PERIODIC else
                PiecewiseLinearEmbeddings([_bins(stats, n) for n in names], f.embedding_dim, name=f"piecewise_linear_{i}"))
        for f in spec.features:  # categorical and bucketized in spec order: the order of the wide table
            if isinstance(f, CategoricalFeature) and f.hash_buckets is not None:
                self.lookup[f.name] = layers.Hashing(num_bins=f.hash_buckets, name=f"hash_{f.name}")
                self.sizes[f.name] = f.hash_buckets
            elif isinstance(f, CategoricalFeature):
                values = _vocabulary(vocab, f.name)
                self.lookup[f.name] = layers.StringLookup(vocabulary=list(values), num_oov_indices=f.num_oov_buckets,
                                                          mask_token=None, name=f"lookup_{f.name}")
                self.sizes[f.name] = f.num_oov_buckets + len(values)
            elif isinstance(f, BucketizedFeature):
                self.bucketize[f.name] = layers.Discretization(bin_boundaries=list(f.boundaries),
                                                               name=f"bucketize_{f.name}")
                self.sizes[f.name] = len(f.boundaries) + 1
        self.bags, self.vectors = list(spec.bags), list(spec.vectors)
        self.tokenize = {f.name: Tokenize(f.max_tokens, f.ngrams, name=f"tokenize_{f.name}")
                         for f in self.bags if isinstance(f, TextFeature)}
        self.bag = {}
        for f in self.bags:
            values = _vocabulary(vocab, f.name)
            self.lookup[f.name] = layers.StringLookup(vocabulary=list(values), num_oov_indices=f.num_oov_buckets,
                                                      mask_token=PAD, name=f"lookup_{f.name}")
            self.bag[f.name] = EmbeddingBag(1 + f.num_oov_buckets + len(values), f.embedding_dim, f.combiner,
                                            name=f"bag_{f.name}")
        self._crosses(units)
        self.by_width: dict[int, list[str]] = {}  # embedding width -> categorical features, in spec order
        for f in self.categorical:
            self.by_width.setdefault(f.embedding_dim, []).append(f.name)
        self.embed = {width: SharedEmbedding([self.sizes[n] for n in names], width, name=f"embed_{width}")
                      for width, names in self.by_width.items()}
        self.concat = layers.Concatenate(name="deep_inputs")
        self.hidden = [layers.Dense(n, activation="relu", name=f"hidden_{i}")
                       for i, n in enumerate(model_cfg.hidden_units())]
        self.dropout = [layers.Dropout(model_cfg.dropout, name=f"dropout_{i}") if model_cfg.dropout > 0 else None
                        for i in range(len(self.hidden))]
        self.deep_logits = layers.Dense(units, name="deep_logits")
        self.wide = (SharedEmbedding(list(self.sizes.values()), units, combiner="sum", embeddings_initializer="zeros",
                                     name="wide") if self.sizes else None)
        self.add = layers.Add(name="logits")
        activations: dict[str, str] = {Task.BINARY: "sigmoid", Task.MULTICLASS: "softmax", Task.REGRESSION: "linear"}
        self.activation = layers.Activation(activations[spec.label.task], name=MODEL_OUTPUT[spec.label.task])

    def _crosses(self, units: int) -> None:
        """A cross of ids: one id a row, a row of the wide table. A cross with a text or list: several a row, their
        weights summed by a table of its own (`units` wide, id 0 none)."""
        self.bag_cross: dict[str, str] = {}  # per cross of a text or list: that bag (the spec allows one)
        self.wide_bag: dict[str, Any] = {}
        for f in self.crossed:
            bag = next((c for c in f.columns if c in self.bag), None)
            if bag is None:
                self.cross[f.name] = tf.keras.layers.HashedCrossing(num_bins=f.hash_buckets, name=f"cross_{f.name}")
                self.sizes[f.name] = f.hash_buckets
            else:
                self.bag_cross[f.name] = bag
                self.cross[f.name] = BagCross(f.hash_buckets, name=f"cross_{f.name}")
                self.wide_bag[f.name] = EmbeddingBag(1 + f.hash_buckets, units, "sum", embeddings_initializer="zeros",
                                                     name=f"wide_{f.name}")

    # -- the two ways in -------------------------------------------------------------------

    def model(self) -> tf.keras.Model:
        """The Keras model over the raw columns; it keeps this object as `ATTRIBUTE`."""
        inputs = {name: tf.keras.Input(shape=self.spec.input_shape(name), dtype=self.spec.input_dtype(name), name=name)
                  for name in self.spec.model_inputs}
        ids = {f.name: self.lookup[f.name](inputs[f.name]) for f in self.categorical}
        bag_ids = {f.name: self.lookup[f.name](self.tokenize[f.name](inputs[f.name]) if f.name in self.tokenize
                                               else inputs[f.name]) for f in self.bags}
        deep = [*(self.bag[f.name](bag_ids[f.name]) for f in self.bags), *(inputs[f.name] for f in self.vectors)]
        model = tf.keras.Model(inputs=inputs, outputs=self._head(ids, inputs, self._cross_rows, deep=deep,
                                                                 bag_ids=bag_ids), name=ModelKind.WIDE_DEEP.value)
        setattr(model, ATTRIBUTE, self)  # a plain object: Keras neither tracks nor saves it
        return model

    def from_codes(self, strings: tf.Tensor, codes: tf.Tensor, numbers: tf.Tensor) -> tf.Tensor:
        """The model's output for a batch given as: `strings`, the distinct values of every
        categorical input (any order, any mix of columns); `codes` [categorical inputs, rows],
        each row's index into `strings`; `numbers` [numeric inputs, rows] float32, nulls filled.
        Inputs of each kind in spec order (`contracts.serving.CODES_SIGNATURE`)."""
        ids = {}
        for f, column_codes in zip(self.categorical, tf.unstack(codes, len(self.categorical))):
            ids[f.name] = tf.gather(self.lookup[f.name](strings), column_codes)
        columns = dict(zip((f.name for f in self.numeric), tf.unstack(numbers, len(self.numeric))))
        return self._head(ids, columns, self._cross_distinct, training=False)

    def from_ids(self, columns: dict[str, tf.Tensor]) -> tf.Tensor:
        """The model's output for the raw columns with each text given as its token ids, [rows, width] int64
        (`contracts.serving.IDS_SIGNATURE`): the same layers as `model()` after its tokenizer and the texts' lookups."""
        ids = {f.name: self.lookup[f.name](columns[f.name]) for f in self.categorical}
        bag_ids = {f.name: columns[f.name] if f.name in self.tokenize else self.lookup[f.name](columns[f.name])
                   for f in self.bags}
        deep = [*(self.bag[f.name](bag_ids[f.name]) for f in self.bags), *(columns[f.name] for f in self.vectors)]
        return self._head(ids, columns, self._cross_rows, training=False, deep=deep, bag_ids=bag_ids)

    # -- shared ----------------------------------------------------------------------------

    def _head(self, ids: dict[str, Any], columns: dict[str, Any], cross, training: bool | None = None,
              deep: list[Any] | None = None, bag_ids: dict[str, Any] | None = None) -> Any:
        """Everything after the lookups. `columns` holds the numeric inputs, `deep` the bags and vectors, `bag_ids` the
        bags' ids (by name), for their crosses."""
        f: Feature  # each loop below goes over one kind of feature
        for f in self.bucketized:
            ids[f.name] = self.bucketize[f.name](columns[f.source])
        for f in self.crossed:  # after the others: a cross may be listed before its components
            if f.name not in self.bag_cross:
                ids[f.name] = cross(f, [ids[c] for c in f.columns])
        numeric = {}
        for f in self.numeric:
            x = columns[f.name]
            numeric[f.name] = self.reshape[f.name](self.normalize[f.name](x) if f.name in self.normalize else x)
        embedded = {name for names in self.embedded.values() for name in names}
        deep = [*(deep or []), *(numeric[f.name] for f in self.numeric if f.name not in embedded)]
        for group, names in self.embedded.items():
            x = self.side_by_side[group]([numeric[n] for n in names]) if len(names) > 1 else numeric[names[0]]
            deep.append(self.embed_numeric[group](x))
        deep += [self.embed[width]([ids[n] for n in names]) for width, names in self.by_width.items()]
        x = deep[0] if len(deep) == 1 else self.concat(deep)
        for dense, dropout in zip(self.hidden, self.dropout):
            x = dense(x)
            if dropout is not None:
                x = dropout(x, training=training)
        logits = self.deep_logits(x)
        # The wide part: the sum of one weight (per output unit) per active id; the bias is deep_logits'.
        wide = [self.wide([ids[n] for n in self.sizes])] if self.wide is not None else []
        for f in self.crossed:
            if f.name in self.bag_cross:
                bag = self.bag_cross[f.name]
                crossed = self.cross[f.name]([(bag_ids or {})[bag], *(ids[c] for c in f.columns if c != bag)])
                wide.append(self.wide_bag[f.name](crossed))
        if wide:
            logits = self.add([logits, *wide])
        return self.activation(logits)

    def _cross_rows(self, f: Any, parts: list[Any]) -> Any:
        return self.cross[f.name](tuple(parts))

    def _cross_distinct(self, f: Any, parts: list[Any]) -> Any:
        """The cross of each distinct combination of component ids, gathered for every row:
        the same ids as `_cross_rows`, hashed once per combination instead of once per row."""
        sizes = [self.sizes[c] for c in f.columns]
        if math.prod(sizes) >= _COMBINATIONS:
            return self._cross_rows(f, parts)
        combined = tf.cast(parts[0], tf.int64)
        for part, size in zip(parts[1:], sizes[1:]):
            combined = combined * size + tf.cast(part, tf.int64)
        distinct, index = tf.unique(combined, out_idx=tf.int32)
        components = []
        for size in reversed(sizes[1:]):
            components.append(distinct % size)
            distinct //= size
        components.append(distinct)
        components = [tf.cast(c, p.dtype) for c, p in zip(reversed(components), parts)]
        return tf.gather(self.cross[f.name](tuple(components)), index)


def of(model: Any) -> WideDeep | None:
    """The WideDeep a Keras model was built from, or None (a user's model, a loaded one)."""
    return getattr(model, ATTRIBUTE, None)


def _vocabulary(vocab: dict[str, list[str]], name: str) -> list[str]:
    values = vocab.get(name)
    if not values:
        raise ValueError(f"features.{name}: the vocabulary is empty or missing; a feature looked up in one needs at "
                         "least one value (check top_k and min_count)")
    return values


def _bins(stats: dict[str, Any], name: str) -> list[float]:
    edges = stats.get(name, {}).get(STATS_BINS)
    if not edges:
        raise ValueError(f"features.{name}: encoding = \"{NumericEncoding.PIECEWISE_LINEAR}\" needs the bins prepare "
                         f"computes, and the dataset's {STATS} has none for it: prepare the dataset again with this spec")
    return edges


def _moments(stats: dict[str, Any], name: str) -> tuple[float, float]:
    """Mean and variance for normalisation; a constant column (std 0 or unknown) is only centred."""
    if name not in stats:
        raise ValueError(f"features.{name}: no statistics for this numeric feature in the dataset's stats.json")
    mean = float(stats[name]["mean"])
    std = stats[name].get("std")
    std = float(std) if std else 0.0
    return mean, (std * std if std > 0 else 1.0)
