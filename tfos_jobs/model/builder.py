"""The Keras model, built from the feature spec: wide & deep, with all preprocessing in the graph.

The model takes the raw columns (a dict of 1-D tensors, as `data.reader` yields them and as a columnar UDF passes them)
and does the vocabulary lookups, normalisation, bucketing and crossing itself, from in-memory vocabularies and
statistics. An exported model therefore needs no file but its own SavedModel, and training and serving cannot disagree
on preprocessing.

Only tf-keras (`TF_USE_LEGACY_KERAS=1`) layers and the package's own (`model.layers`) are used, no Lambda, so the model
builds under `strategy.scope()` for MultiWorkerMirrored and ParameterServer strategies."""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import traceback
from typing import TYPE_CHECKING, Any, Callable

from tfos_jobs.config import ModelConfig
from tfos_jobs.config.train import KIND_KEY as KIND
from tfos_jobs.config.train import OPTIMIZERS, Optimizer
from tfos_jobs.contracts.dataset import STATS_BINS
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.kinds import NumericEncoding, NumericFeature, SequenceFeature
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.tasks import ModelKind, Task

if TYPE_CHECKING:
    import tensorflow as tf

BuildFn = Callable[[FeatureSpec, "dict[str, list[str]]", "dict[str, Any]", ModelConfig], "tf.keras.Model"]



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


# The settings a model compiled by its own function does not use (`compile_for_training`).
OWN_COMPILE_IGNORES = ("train.optimizer", "train.learning_rate")


def own_compile(model: "tf.keras.Model") -> dict[str, Any] | None:
    """What a model function compiled its model with (optimizer, loss, metrics, loss weights), for training to compile
    its training model with the same; None for a model returned uncompiled, which gets the label task's loss and
    metrics and `train.optimizer` (`compile_model`)."""
    if not getattr(model, "_is_compiled", False):
        return None
    return {k: v for k, v in model._get_compile_args(user_metrics=True).items() if v is not None}


def compile_for_training(trainer: "tf.keras.Model", model: "tf.keras.Model", spec: FeatureSpec, optimizer: str,
                         learning_rate: float, steps_per_execution: int = 1) -> "tf.keras.Model":
    """`trainer` (the training model wrapped around `model`, or `model` itself) compiled as `model` was, when its
    function compiled it, else as `compile_model` does."""
    own = own_compile(model)
    if own is None:
        return compile_model(trainer, spec, optimizer, learning_rate, steps_per_execution=steps_per_execution)
    trainer.compile(**own, steps_per_execution=steps_per_execution)
    return trainer


def describe_compile(own: dict[str, Any]) -> str:
    """One line for the driver's log: the loss, metrics and optimizer a model function compiled with."""
    def names(value: Any) -> str:
        items = value if isinstance(value, (list, tuple)) else list(value.values()) if isinstance(value, dict) else [value]
        return ", ".join(v if isinstance(v, str) else getattr(v, "name", None) or getattr(v, "__name__", None)
                         or type(v).__name__ for v in items)

    optimizer = own.get("optimizer")
    rate = getattr(optimizer, "learning_rate", None)
    try:
        rate_text = f" (learning rate {float(rate):g})" if rate is not None else ""
    except (TypeError, ValueError):  # a schedule
        rate_text = f" ({type(rate).__name__})"
    parts = [f"loss {names(own['loss'])}" if "loss" in own else "its own loss (train_step)",
             f"metrics {names(own['metrics'])}" if own.get("metrics") else "no metrics",
             f"optimizer {type(optimizer).__name__}{rate_text}"]
    return "; ".join(parts)


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

    classes: dict[str, Any] = {
        Optimizer.ADAM: tf.keras.optimizers.Adam,
        Optimizer.ADAGRAD: tf.keras.optimizers.Adagrad,
        Optimizer.SGD: tf.keras.optimizers.SGD,
        Optimizer.RMSPROP: tf.keras.optimizers.RMSprop,
        Optimizer.FTRL: tf.keras.optimizers.Ftrl,
    }
    if name not in classes:
        raise ValueError(f"train.optimizer: {name!r} is not one of: {', '.join(OPTIMIZERS)}")
    return classes[name](learning_rate=learning_rate)


def resolve_build(kind: str) -> BuildFn:
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
    from tfos_jobs.user_code import import_function

    return import_function(kind, KIND)


DRY_ROWS = 2  # rows of the placeholder batch a dry build's model is called on
# Why a Keras 3 model is refused, and what to do instead (the error's end names the one-line change).
KERAS_3_REFUSED = ("Keras 3 does not train under TensorFlow's MultiWorkerMirrored strategy (keras-team/keras#20585) nor "
                   "its ParameterServer strategy (keras-team/keras#18624), which TFoS's workers run; build the same model "
                   "with tf-keras, the Keras of TensorFlow 2 (installed with the package)")


@dataclasses.dataclass(frozen=True)
class CheckedBuild:
    """A build function checked on the driver against the spec it is for (`check_build`): a training run builds its
    model on the nodes without checking it again. `by_value`: the callable the nodes get pickled (a script's or
    notebook's function), None when they import `config.kind` by name. `compiled`: what the function compiles its model
    with (`describe_compile`), "" when it returns it uncompiled."""

    config: ModelConfig
    spec: FeatureSpec
    fn: BuildFn
    by_value: BuildFn | None = None
    compiled: str = ""

    def holds_for(self, model_cfg: ModelConfig, spec: FeatureSpec) -> bool:
        """Whether this check is the one `model_cfg` would get against `spec`: the same settings
        and features, defaults aside (a config's "mean" is a number in the dataset's own spec,
        and no build reads the value that fills a null)."""
        return self.config == model_cfg and _without_defaults(self.spec) == _without_defaults(spec)


def kind_of(model: str | Callable[..., Any] | CheckedBuild) -> tuple[str, BuildFn | None]:
    """A model given as a kind, "module:function" or a callable: its `kind`, and the callable to
    pickle by value when its module cannot be imported by name on the executors (a script's or
    notebook's `__main__`, a function defined in a function)."""
    if isinstance(model, CheckedBuild):
        return model.config.kind, model.by_value
    if isinstance(model, str):
        return model, None
    if not callable(model):
        raise ConfigError(f"train(): build= must be a model kind, 'module:function' or a callable, got {model!r}")
    module, name = getattr(model, "__module__", None) or "__main__", getattr(model, "__qualname__", "model")
    kind = f"{module}:{name}"
    if module == "__main__" or "<" in name or "." in name:
        return kind, model
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        found = None
    return (kind, None) if found is model else (kind, model)


def _without_defaults(spec: FeatureSpec) -> list[dict[str, Any]]:
    return [{k: v for k, v in f.items() if k != "default"} for f in spec.to_dict()["features"]]


def check_build(*, model_cfg: ModelConfig, spec: FeatureSpec,
                build: str | Callable[..., Any] | CheckedBuild | None = None) -> CheckedBuild:
    """The build function, checked on the driver before any Spark job: `build` when it is a callable, else
    `model_cfg.kind` imported and resolved; one `build` already checked against `spec` is returned as it is. A user
    function must take the four arguments of `BuildFn` and, called with `spec` and placeholder vocabularies and
    statistics derived from it (no dataset is read: it may be on a cluster filesystem), return a `tf.keras.Model` that
    reads only the spec's model inputs and whose output export can name (one tensor per task, `model.export`). Raises
    ConfigError naming `train.model.kind`, with the function's own error as one line; the built-in kinds are only
    resolved."""
    if isinstance(build, CheckedBuild) and build.holds_for(model_cfg, spec):
        return build
    by_value = None if build is None else kind_of(build)[1]
    fn = by_value
    name = model_cfg.kind if fn is None else getattr(fn, "__qualname__", repr(fn))
    if fn is None:
        if model_cfg.is_user_function:  # the user's module imports TensorFlow the package's way (tf-keras)
            from tfos_jobs.tf_import import tensorflow

            tensorflow()
        try:
            fn = resolve_build(model_cfg.kind)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if not model_cfg.is_user_function:
            return CheckedBuild(model_cfg, spec, fn)
    elif not callable(fn):
        raise ConfigError(f"{KIND}: {fn!r} is not callable: give a model function (spec, vocab, stats, model_cfg)")
    try:
        inspect.signature(fn).bind(spec, {}, {}, model_cfg)
    except TypeError:
        raise ConfigError(f"{KIND}: {name} must take four positional arguments (spec, vocab, stats, model_cfg); "
                          f"its signature is {_signature(fn)}") from None
    except ValueError:  # no signature to read (a builtin): the dry build below tells
        pass
    compiled = _dry_build(fn, name, model_cfg, spec)
    return CheckedBuild(model_cfg, spec, fn, by_value, compiled)


def _signature(fn: Callable) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "unknown"


def _dry_build(fn: BuildFn, name: str, model_cfg: ModelConfig, spec: FeatureSpec) -> str:
    """The checks above on a model built from placeholders; what it was compiled with ("": uncompiled)."""
    from tfos_jobs.tf_import import tensorflow

    tf = tensorflow()
    dry_spec = placeholder_spec(spec)
    try:
        try:
            model = fn(dry_spec, placeholder_vocab(dry_spec), placeholder_stats(dry_spec), model_cfg)
        except Exception as e:
            raise ConfigError(f"{KIND}: {name} raised {_last_line(e)}") from None
        if not isinstance(model, tf.keras.Model):
            what, module = type(model).__name__, type(model).__module__
            if module.startswith("keras") and hasattr(model, "layers"):
                raise ConfigError(f"{KIND}: {name} returned a Keras 3 model ({module}.{what}), not a tf.keras.Model: "
                                  f"{KERAS_3_REFUSED}: `import tf_keras as keras` in place of `import keras`")
            hint = (" (a layer's output: return tf.keras.Model(inputs, outputs))" if "KerasTensor" in what or
                    tf.is_tensor(model) else "")
            raise ConfigError(f"{KIND}: {name} returned a {what}, not a tf.keras.Model{hint}")
        inputs = input_names(model)
        if inputs is not None:
            extra = [n for n in inputs if n not in spec.model_inputs]
            if extra:
                raise ConfigError(f"{KIND}: {name} built a model with input(s) {', '.join(extra)} that the feature "
                                  f"spec does not provide; its model inputs are {', '.join(spec.model_inputs)}")
        _check_output(tf, model, name, dry_spec, inputs)
        own = own_compile(model)
        return "" if own is None else describe_compile(own)
    finally:
        tf.keras.backend.clear_session()


def _last_line(e: BaseException) -> str:
    lines = [ln.strip() for ln in "".join(traceback.format_exception_only(type(e), e)).splitlines() if ln.strip()]
    return lines[-1] if lines else type(e).__name__


def input_names(model: "tf.keras.Model") -> list[str] | None:
    """The raw columns a model reads (a dict input's keys, else its input layers' names);
    None for a subclassed model not yet called."""
    if not getattr(model, "inputs", None):
        return None
    if isinstance(model.input, dict):
        return list(model.input)
    return list(model.input_names)


def _check_output(tf, model: "tf.keras.Model", name: str, spec: FeatureSpec, inputs: list[str] | None) -> None:
    """The model called on a placeholder batch, as export calls it (a dict of 1-D columns):
    one tensor, per row one probability (binary), a distribution over the classes (multiclass)
    or one value (regression)."""
    batch = placeholder_batch(spec, inputs if inputs is not None else spec.model_inputs)
    try:
        out = model(batch, training=False)
    except Exception as e:
        raise ConfigError(f"{KIND}: the model {name} built fails on a batch of the spec's model inputs "
                          f"(a dict of 1-D tensors): {_last_line(e)}") from None
    if spec.is_sequence:
        return
    if not tf.is_tensor(out):
        raise ConfigError(f"{KIND}: the model {name} built returns {type(out).__name__}; export needs one tensor")
    task, shape, values = spec.label.task, tuple(out.shape), out.numpy()
    if task == Task.MULTICLASS:
        want = f"[rows, {num_outputs(spec)}] (a softmax over the classes)"
        ok = shape == (DRY_ROWS, num_outputs(spec)) and abs(values.sum(axis=-1) - 1).max() < 1e-3
    else:
        what = "probability (a sigmoid)" if task == Task.BINARY else "value"
        want = f"[rows] or [rows, 1] (one {what} per row)"
        ok = shape in ((DRY_ROWS,), (DRY_ROWS, 1)) and (task != Task.BINARY or (0 <= values.min() and values.max() <= 1))
    if not ok:
        raise ConfigError(f"{KIND}: the model {name} built outputs shape {list(shape)} for {DRY_ROWS} rows of a "
                          f"{task} label; export needs {want}")


def placeholder_spec(spec: FeatureSpec) -> FeatureSpec:
    """`spec` as a prepared dataset's would be: numeric defaults resolved, multiclass classes listed."""
    for f in spec.numeric:
        if f.default == "mean":
            spec = spec.with_feature(dataclasses.replace(f, default=0.0))
    if not spec.is_sequence and spec.label.task == Task.MULTICLASS and not spec.label.classes:
        spec = spec.with_feature(dataclasses.replace(spec.label, classes=("class_0", "class_1", "class_2")))
    return spec


def placeholder_vocab(spec: FeatureSpec) -> dict[str, list[str]]:
    """A two-token vocabulary per categorical feature, as `_meta/vocab/<name>.txt` holds them."""
    return {f.name: [f"{f.name}_0", f"{f.name}_1"] for f in spec.with_vocabulary}


def placeholder_stats(spec: FeatureSpec) -> dict[str, dict[str, Any]]:
    """Statistics of the shape `_meta/stats.json` holds: per numeric (or sequence) feature count,
    mean, std, min, max, and `bins` (edges) for a piecewise-linear encoding."""
    stats: dict[str, dict[str, Any]] = {}
    features: tuple[NumericFeature | SequenceFeature, ...] = (*spec.numeric, *spec.sequences)
    for f in features:
        stats[f.name] = {"count": DRY_ROWS, "mean": 0.0, "std": 1.0, "min": -1.0, "max": 1.0}
        if isinstance(f, NumericFeature) and f.encoding == NumericEncoding.PIECEWISE_LINEAR:
            stats[f.name][STATS_BINS] = [-1.0 + 2.0 * i / f.bins for i in range(f.bins + 1)]
    return stats


def placeholder_batch(spec: FeatureSpec, names) -> dict[str, Any]:
    """DRY_ROWS rows of each named input: a known and an unseen category (a list's first elements), two numbers (or
    vectors of them)."""
    import tensorflow as tf

    out = {}
    for n in names:
        shape = spec.input_shape(n)
        if isinstance(spec.get(n), SequenceFeature):
            out[n] = tf.zeros([DRY_ROWS, spec.time.window], tf.float32)
        elif spec.input_dtype(n) == "string":
            values = tf.constant([f"{n}_0", "unseen"])
            out[n] = tf.pad(values[:, None], [[0, 0], [0, shape[0] - 1]]) if shape else values
        else:
            out[n] = tf.constant([[0.5] * shape[0], [-0.5] * shape[0]] if shape else [0.5, -0.5], tf.float32)
    return out
