"""The Keras model, built from the feature spec: wide & deep, with all preprocessing in the graph.

The model takes the raw columns (a dict of 1-D tensors, as `data.reader` yields them and as a
columnar UDF passes them) and does the vocabulary lookups, normalisation, bucketing and
crossing itself, from in-memory vocabularies and statistics. An exported model therefore needs
no file but its own SavedModel, and training and serving cannot disagree on preprocessing.

Only tf-keras (`TF_USE_LEGACY_KERAS=1`) layers and the package's own (`model.layers`) are used,
no Lambda, so the model builds under `strategy.scope()` for MultiWorkerMirrored and
ParameterServer strategies.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Callable

from tfos_jobs.config import ModelConfig
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.tasks import ModelKind, Task

if TYPE_CHECKING:
    import tensorflow as tf

ModelFn = Callable[[FeatureSpec, "dict[str, list[str]]", "dict[str, Any]", ModelConfig], "tf.keras.Model"]

OPTIMIZERS = ("adam", "adagrad", "sgd", "rmsprop", "ftrl")


def num_outputs(spec: FeatureSpec) -> int:
    """Logit units: one for binary and regression, one per class for multiclass."""
    label = spec.label
    if label.task != Task.MULTICLASS:
        return 1
    if len(label.classes) < 2:
        raise ValueError(f"features.{label.name}.classes: a multiclass label needs its classes listed "
                         f"(at least two), got {list(label.classes)}")
    return len(label.classes)


def build_model(spec: FeatureSpec, vocab: dict[str, list[str]], stats: dict[str, Any],
                model_cfg: ModelConfig) -> "tf.keras.Model":
    """Wide & deep over the raw columns (`model.wide_deep`)."""
    from tfos_jobs.model.wide_deep import WideDeep

    return WideDeep(spec, vocab, stats, model_cfg, num_outputs(spec)).model()


def compile_model(model: "tf.keras.Model", spec: FeatureSpec, optimizer: str, learning_rate: float,
                  steps_per_execution: int = 1) -> "tf.keras.Model":
    """Loss and metrics by task. Metric names (`auc`, `accuracy`, `rmse`) are what logs and
    early stopping refer to, so they are fixed here."""
    if spec.is_sequence:
        from tfos_jobs.model.sequence import error_as_loss

        model.compile(optimizer=make_optimizer(optimizer, learning_rate), loss=error_as_loss,
                      steps_per_execution=steps_per_execution)
        return model
    loss, metrics = loss_and_metrics(spec)
    model.compile(optimizer=make_optimizer(optimizer, learning_rate), loss=loss, metrics=metrics,
                  steps_per_execution=steps_per_execution)
    return model


def loss_and_metrics(spec: FeatureSpec) -> tuple[Any, list[Any]]:
    """The loss and the metrics of a row model's task, new objects on every call."""
    import tensorflow as tf

    task = spec.label.task
    if task == Task.BINARY:
        return (tf.keras.losses.BinaryCrossentropy(),
                [tf.keras.metrics.AUC(name="auc"), tf.keras.metrics.BinaryAccuracy(name="accuracy")])
    if task == Task.MULTICLASS:
        return tf.keras.losses.SparseCategoricalCrossentropy(), [tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    return tf.keras.losses.MeanSquaredError(), [tf.keras.metrics.RootMeanSquaredError(name="rmse")]


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
    if kind == ModelKind.WIDE_DEEP:
        return build_model
    if kind == ModelKind.SEQUENCE_AUTOENCODER:
        from tfos_jobs.model.sequence import build_autoencoder

        return build_autoencoder
    module_name, sep, attr = kind.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"train.model.kind: {kind!r} is not '{ModelKind.WIDE_DEEP}', "
                         f"'{ModelKind.SEQUENCE_AUTOENCODER}' or 'module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"train.model.kind: cannot import module {module_name!r} of {kind!r}: {e}") from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"train.model.kind: {kind!r}: module {module_name!r} has no callable {attr!r}")
    return fn
