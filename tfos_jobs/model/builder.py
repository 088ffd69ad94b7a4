"""The Keras model, built from the feature spec: wide & deep, with all preprocessing in the graph.

The model takes the raw columns (a dict of 1-D tensors, as `data.reader` yields them and as a
columnar UDF passes them) and does the vocabulary lookups, normalisation, bucketing and
crossing itself, from in-memory vocabularies and statistics. An exported model therefore needs
no file but its own SavedModel, and training and serving cannot disagree on preprocessing.

Only tf-keras (`TF_USE_LEGACY_KERAS=1`) layers are used, no Lambda and no custom layer, so the
model builds under `strategy.scope()` for MultiWorkerMirrored and ParameterServer strategies.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable

from tfos_jobs.config import SEQUENCE_MODEL, ModelConfig
from tfos_jobs.contracts.serving import MODEL_OUTPUT
from tfos_jobs.features.spec import BucketizedFeature, CategoricalFeature, FeatureSpec, NumericFeature

if TYPE_CHECKING:
    import tensorflow as tf

ModelFn = Callable[[FeatureSpec, "dict[str, list[str]]", "dict[str, Any]", ModelConfig], "tf.keras.Model"]

OPTIMIZERS = ("adam", "adagrad", "sgd", "rmsprop", "ftrl")


def input_dtype(spec: FeatureSpec, name: str) -> str:
    """The dtype of a model input: float32 for numeric features, string for categorical ones."""
    return "float32" if spec.get(name).kind == "numeric" else "string"


def num_outputs(spec: FeatureSpec) -> int:
    """Logit units: one for binary and regression, one per class for multiclass."""
    label = spec.label
    if label.task != "multiclass":
        return 1
    if len(label.classes) < 2:
        raise ValueError(f"features.{label.name}.classes: a multiclass label needs its classes listed "
                         f"(at least two), got {list(label.classes)}")
    return len(label.classes)


def build_model(spec: FeatureSpec, vocab: dict[str, list[str]], stats: dict[str, Any],
                model_cfg: ModelConfig) -> "tf.keras.Model":
    """Wide & deep, as the census DNNLinearCombinedClassifier.

    Wide: a linear model (one weight per id and output unit) over the categorical, bucketized
    and crossed features. Deep: embeddings of the categoricals and the normalised numerics
    through `model_cfg.hidden_units()` ReLU layers. The two logits are added.

    The id tables are few variables, not one per feature (`SharedEmbedding`): all wide weights
    in one, the deep embeddings in one per embedding width. A distributed step's cost grows
    with the number of variables it moves, not with their size, at this model's scale.
    """
    import tensorflow as tf

    from tfos_jobs.model.layers import SharedEmbedding

    layers = tf.keras.layers
    units = num_outputs(spec)
    inputs = {name: tf.keras.Input(shape=(), dtype=input_dtype(spec, name), name=name)
              for name in spec.model_inputs}

    ids: dict[str, Any] = {}  # per categorical, bucketized and crossed feature: int64 ids, shape [batch]
    sizes: dict[str, int] = {}  # ... and how many ids there are
    by_width: dict[int, list[str]] = {}  # embedding width -> categorical features, in spec order
    numeric: list[Any] = []
    for f in spec.features:
        if isinstance(f, NumericFeature):
            x = inputs[f.name]
            if f.normalize:
                mean, variance = _moments(stats, f.name)
                x = layers.Normalization(axis=None, mean=mean, variance=variance, name=f"norm_{f.name}")(x)
            numeric.append(layers.Reshape((1,), name=f"col_{f.name}")(x))
        elif isinstance(f, CategoricalFeature):
            values = vocab.get(f.name)
            if not values:
                raise ValueError(f"features.{f.name}: the vocabulary is empty or missing; a categorical "
                                 "feature needs at least one value (check top_k and min_count)")
            ids[f.name] = layers.StringLookup(vocabulary=list(values), num_oov_indices=f.num_oov_buckets,
                                              mask_token=None, name=f"lookup_{f.name}")(inputs[f.name])
            sizes[f.name] = f.num_oov_buckets + len(values)
            by_width.setdefault(f.embedding_dim, []).append(f.name)
        elif isinstance(f, BucketizedFeature):
            ids[f.name] = layers.Discretization(bin_boundaries=list(f.boundaries),
                                                name=f"bucketize_{f.name}")(inputs[f.source])
            sizes[f.name] = len(f.boundaries) + 1
    for f in spec.of_kind("crossed"):  # after the loop: a cross may be listed before its components
        ids[f.name] = layers.HashedCrossing(num_bins=f.hash_buckets, name=f"cross_{f.name}")(
            tuple(ids[c] for c in f.columns))
        sizes[f.name] = f.hash_buckets

    deep = numeric + [
        SharedEmbedding([sizes[n] for n in names], width, name=f"embed_{width}")([ids[n] for n in names])
        for width, names in by_width.items()]
    x = deep[0] if len(deep) == 1 else layers.Concatenate(name="deep_inputs")(deep)
    for i, n in enumerate(model_cfg.hidden_units()):
        x = layers.Dense(n, activation="relu", name=f"hidden_{i}")(x)
        if model_cfg.dropout > 0:
            x = layers.Dropout(model_cfg.dropout, name=f"dropout_{i}")(x)
    logits = layers.Dense(units, name="deep_logits")(x)
    if ids:  # wide: the sum of one weight (per output unit) per active id; the bias is deep_logits'
        wide = SharedEmbedding(list(sizes.values()), units, combiner="sum", embeddings_initializer="zeros",
                               name="wide")(list(ids.values()))
        logits = layers.Add(name="logits")([logits, wide])

    activation = {"binary": "sigmoid", "multiclass": "softmax", "regression": "linear"}[spec.label.task]
    output = layers.Activation(activation, name=MODEL_OUTPUT[spec.label.task])(logits)
    return tf.keras.Model(inputs=inputs, outputs=output, name="wide_deep")


def _moments(stats: dict[str, Any], name: str) -> tuple[float, float]:
    """Mean and variance for normalisation; a constant column (std 0 or unknown) is only centred."""
    if name not in stats:
        raise ValueError(f"features.{name}: no statistics for this numeric feature in the dataset's stats.json")
    mean = float(stats[name]["mean"])
    std = stats[name].get("std")
    std = float(std) if std else 0.0
    return mean, (std * std if std > 0 else 1.0)


def compile_model(model: "tf.keras.Model", spec: FeatureSpec, optimizer: str, learning_rate: float,
                  steps_per_execution: int = 1) -> "tf.keras.Model":
    """Loss and metrics by task. Metric names (`auc`, `accuracy`, `rmse`) are what logs and
    early stopping refer to, so they are fixed here."""
    import tensorflow as tf

    if spec.is_sequence:
        from tfos_jobs.model.sequence import error_as_loss

        model.compile(optimizer=make_optimizer(optimizer, learning_rate), loss=error_as_loss,
                      steps_per_execution=steps_per_execution)
        return model
    task = spec.label.task
    if task == "binary":
        loss: Any = tf.keras.losses.BinaryCrossentropy()
        metrics: list[Any] = [tf.keras.metrics.AUC(name="auc"), tf.keras.metrics.BinaryAccuracy(name="accuracy")]
    elif task == "multiclass":
        loss = tf.keras.losses.SparseCategoricalCrossentropy()
        metrics = [tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    else:
        loss = tf.keras.losses.MeanSquaredError()
        metrics = [tf.keras.metrics.RootMeanSquaredError(name="rmse")]
    model.compile(optimizer=make_optimizer(optimizer, learning_rate), loss=loss, metrics=metrics,
                  steps_per_execution=steps_per_execution)
    return model


def make_optimizer(name: str, learning_rate: float) -> "tf.keras.optimizers.Optimizer":
    import tensorflow as tf

    classes = {
        "adam": tf.keras.optimizers.Adam,
        "adagrad": tf.keras.optimizers.Adagrad,
        "sgd": tf.keras.optimizers.SGD,
        "rmsprop": tf.keras.optimizers.RMSprop,
        "ftrl": tf.keras.optimizers.Ftrl,
    }
    if name not in classes:
        raise ValueError(f"train.optimizer: {name!r} is not one of: {', '.join(OPTIMIZERS)}")
    return classes[name](learning_rate=learning_rate)


def resolve_model_fn(kind: str) -> ModelFn:
    """`wide_deep`, `sequence_autoencoder`, or a user function "module:function" with
    build_model's signature that returns an uncompiled model taking the same dict of raw columns."""
    if kind == "wide_deep":
        return build_model
    if kind == SEQUENCE_MODEL:
        from tfos_jobs.model.sequence import build_autoencoder

        return build_autoencoder
    module_name, sep, attr = kind.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"train.model.kind: {kind!r} is not 'wide_deep', '{SEQUENCE_MODEL}' or 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"train.model.kind: cannot import module {module_name!r} of {kind!r}: {e}") from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"train.model.kind: {kind!r}: module {module_name!r} has no callable {attr!r}")
    return fn
