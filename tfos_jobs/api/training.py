"""The API's training steps: a model trained on a prepared dataset, and a sweep of trainings."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, cast

from pyspark.sql import SparkSession

from tfos_jobs.config import Config, TrainConfig
from tfos_jobs.config.loading import as_loaded
from tfos_jobs.config.sweep import SweepConfig
from tfos_jobs.contracts.dataset import Manifest, Split
from tfos_jobs.contracts.metrics import Metrics, NodeSummary
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.contracts.sweep_dir import SweepDir
from tfos_jobs.contracts.trial import TrialResult
from tfos_jobs.errors import ConfigError
from tfos_jobs.model import train_function
from tfos_jobs.model.train_function import CheckedFunction
from tfos_jobs.model.builder import OWN_COMPILE_IGNORES, CheckedBuild, check_build, kind_of
from tfos_jobs.search import space as search_space
from tfos_jobs.search.space import CheckedSweep

Log = Callable[[str], None]


@dataclass(frozen=True)
class TrainResult:
    """What a training run ended with (the figures of `<model_dir>/metrics.json`).

    `metrics`: per split (`eval`, and `test` when the dataset holds one), metric -> value, of
    the model kept; `kept_epoch`: the epoch that model comes from; `epochs`: epochs run;
    `nodes`: the TF nodes (role, index, host, executor); `attempts`: TF cluster launches."""

    metrics: Mapping[str, Mapping[str, float]]
    kept_epoch: int | None
    epochs: int
    model_dir: str
    saved_model: str
    nodes: tuple[NodeSummary, ...]
    seconds: float
    attempts: int
    strategy: str

    @classmethod
    def of(cls, model_dir: str, metrics: Metrics) -> "TrainResult":
        figures = cast(Mapping[str, Mapping[str, float] | None], metrics)  # per split: the model kept's
        splits = {s: dict(found) for s in (Split.EVAL.value, Split.TEST.value) if (found := figures.get(s))}
        return cls(metrics=splits, kept_epoch=metrics["kept_epoch"], epochs=int(metrics["epochs"]),
                   model_dir=model_dir, saved_model=metrics["saved_model"], nodes=tuple(metrics["nodes"]),
                   seconds=float(metrics["seconds"]), attempts=int(metrics["attempts"]), strategy=metrics["strategy"])


def train(spark: SparkSession, *, dataset: str | Manifest | None = None, model_dir: str | None = None,
          build: str | Callable[..., Any] | CheckedBuild | None = None, config: Config | TrainConfig | None = None,
          fn: str | Callable[..., Any] | CheckedFunction | None = None, overwrite: bool = False,
          log: Log = print) -> TrainResult:
    """Train on `dataset` and export a SavedModel into `model_dir`; the model is built from the
    dataset's own feature spec.

    Parameters
    ----------
    dataset : the `Manifest` that `prepare` returned, or where it wrote the dataset.
    model_dir : where the model goes (local, hdfs://, s3a://).
    build : how the model is built (a config's `train.model.kind`): "wide_deep" (the default),
        "sequence_autoencoder", "module:function", or a callable `build(spec, vocab, stats, model_cfg)
        -> tf.keras.Model` (docs/training.md); one defined in a script or notebook reaches the TF nodes
        by value. The model's settings (`params`, layers) are `config`'s `model`. (`model`, in `register`
        and `predict`, is a trained model.)
    config : every other setting: a `TrainConfig` (the `[train]` table), or a loaded `Config`, whose
        `[train]` applies and whose `[tracking]` logs the run to MLflow (what `tfos train` does).
        Default: `TrainConfig()`. The three above may come from it instead (its `dataset`,
        `model_dir`, `model.kind`); given both ways, they must agree.
    fn : a training function of your own (a config's `train.fn`), "module:function" or a callable, called as
        `fn(ctx)` on every TF node (under parameter_server, on the chief, which coordinates) in place of the
        package's build, fit and export: `ctx` gives the strategy, this worker's shard of the dataset, the callbacks
        that report, checkpoint and resume, a custom loop's steps (`ctx.loop`), the params and `ctx.export(model)`
        (docs/training.md, "Your own training function"). TensorFlowOnSpark's `main_fun(args, ctx)` is taken too.
    overwrite : replace a trained model already in `model_dir`.

    Returns
    -------
    TrainResult : the metrics of the model kept, where it is, how the run went.

    Raises
    ------
    ConfigError : a setting that cannot work, named, before any Spark job (the model is built once
        on the driver first).
    TrainingError : the run failed; the failing node's own error.

    Stable (its settings in one `config` since this release). Example: ``api.train(spark, dataset=manifest, model_dir="out/model", build=my_build, config=TrainConfig(epochs=3))``"""
    from tfos_jobs.cluster.driver import node_inputs
    from tfos_jobs.jobs.train.driver import job, tracked
    from tfos_jobs.storage import Storage

    whole = config if isinstance(config, Config) else None
    given = as_loaded(config.train if isinstance(config, Config) else config or TrainConfig(), "train")
    where = "train" if whole is not None else "train()"
    storage = Storage(spark)
    settings = _with_handles(given, dataset=dataset.output if isinstance(dataset, Manifest) else dataset,
                             model_dir=model_dir, kind=None if build is None else kind_of(build)[0],
                             from_config=config is not None, where=where,
                             same=lambda a, b: a == b or storage.qualify(a) == storage.qualify(b))
    own = train_function.check(fn if fn is not None else settings.fn) if fn is not None or settings.fn else None
    if own is not None:
        if build is not None:
            raise ConfigError(f"{where}: give build= or fn=, not both: a training function builds its own model")
        settings = dataclasses.replace(settings, fn=own.name)
    meta = node_inputs.read_dataset(storage, "train.dataset" if whole is not None else "dataset", settings.dataset)
    errors = settings.errors(meta.spec)
    if errors:
        raise ConfigError(f"{where}: invalid settings:\n  " + "\n  ".join(errors))
    definition = None
    if own is None:
        definition = check_build(model_cfg=settings.model, spec=meta.spec, build=build)  # a dry build: a wrong model fails here, once
        if definition.compiled:
            log(f"train.model.kind: {settings.model.kind} compiles its model itself: {definition.compiled} "
                f"({' and '.join(OWN_COMPILE_IGNORES)} are not used)")
    if whole is not None:
        metrics = tracked.run(spark, dataclasses.replace(whole, train=settings), overwrite=overwrite, log=log,
                              model=definition, meta=meta, fn=own)
    else:
        metrics = job.run(spark, settings, overwrite=overwrite, log=log, model=definition, meta=meta, fn=own)
    return TrainResult.of(ModelDir.holding(metrics["saved_model"]).path, metrics)


def _with_handles(settings: TrainConfig, *, dataset: str | None, model_dir: str | None, kind: str | None,
                  from_config: bool, where: str, same: Callable[[str, str], bool] = str.__eq__) -> TrainConfig:
    """`settings` with the run's dataset, model directory and model kind, each given once: as an
    argument, or in `settings` (a config's own value, not `TrainConfig`'s default). Two values
    for one setting are refused rather than one silently winning; `same` tells two spellings of
    one place apart from two places (a relative path and its `file:` URL)."""
    defaults = TrainConfig()
    chosen = {}
    for key, given, own, default in (("dataset", dataset, settings.dataset, defaults.dataset),
                                     ("model_dir", model_dir, settings.model_dir, defaults.model_dir),
                                     ("model.kind", kind, settings.model.kind, defaults.model.kind)):
        if given is not None and own != default and not same(given, own):
            raise ConfigError(f"{where}: {key} is given twice, {given!r} as an argument and {own!r} in config=; "
                              "give it once")
        if given is None and not from_config and key != "model.kind":
            raise ConfigError(f"{where}: give {key}= (or a config= that names it)")
        chosen[key] = given if given is not None else own
    model = dataclasses.replace(settings.model, kind=chosen["model.kind"])
    return dataclasses.replace(settings, dataset=chosen["dataset"], model_dir=chosen["model_dir"], model=model)


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: its best trial's row (None when none completed), every trial's, as
    `results.parquet` holds them (`contracts.trial.TrialResult`), and the best trial's model
    (`<sweep dir>/best`), which `register` and `predict` take as `model=`."""

    best: TrialResult | None
    results: tuple[TrialResult, ...]
    best_model: ModelDir | None = None


def check_model(*, config: Config, build: str | Callable[..., Any] | None = None) -> CheckedBuild | CheckedFunction:
    """The model a training run with `config` builds (`build`, else its `train.model.kind`), checked
    by a dry build against the config's feature spec before any Spark session exists; `train`
    takes the result as `build=` and does not build it again (`tfos train` checks this way). With a
    training function (`train.fn`) and no `build`, the function instead, found and its arguments
    checked: `train` takes it as `fn=`.

    Raises
    ------
    ConfigError : the model cannot be imported or built, or does not fit the spec, named.

    Stable. Example: ``api.train(spark, build=api.check_model(config=census), config=census)``"""
    if config.train.fn and build is None:
        return train_function.check(config.train.fn)
    model = config.train.model if build is None else dataclasses.replace(config.train.model, kind=kind_of(build)[0])
    return check_build(model_cfg=model, spec=config.features, build=build)


def check_sweep(*, config: Config, space: SweepConfig) -> CheckedSweep:
    """Every value the sweep's trials take, checked as a config's, and every distinct model they
    build, dry-built once, before any Spark session exists; `sweep` takes the result as `space=`
    and does not check it again (`tfos sweep` checks this way).

    Raises
    ------
    ConfigError : a wrong space, a trial value the config refuses, or a model that fails its dry build.

    Stable. Example: ``api.sweep(spark, config=census, space=api.check_sweep(config=census, space=space))``"""
    return search_space.check_sweep(config, space)


def sweep(spark: SparkSession, *, config: Config, space: SweepConfig | CheckedSweep, log: Log = print) -> SweepResult:
    """A hyperparameter sweep whose trials run as Spark tasks (docs/sweeps.md).

    `config`: the base config, every trial's but for the settings the sweep gives it; `space`: what
    to search (`config.sweep.load("conf/sweep.toml")`, or a `SweepConfig` built in code, e.g.
    ``SweepConfig(dir="out/sweep", max_trials=4, params=(Param(key="train.learning_rate", type="float",
    low=1e-4, high=1e-2, scale="log"),))``), or what `check_sweep` returned for `config`. Each trial's
    config is `config.with_settings(...)` of the sweep's fixed settings and the trial's values.

    With the base config's `[tracking]` enabled, the sweep and each trial are MLflow runs
    (docs/tracking.md), as `tfos sweep` logs them.

    Returns
    -------
    SweepResult : the best trial's row, every trial's (`contracts.trial.TrialResult`), the best model.

    Raises
    ------
    ConfigError : a wrong space or base config, or a model a trial would build that fails its dry
        build (each distinct model built once), before any Spark job.

    Stable. Example: ``api.register(spark, name="predict_income", model=api.sweep(spark, config=census,
    space=space).best_model)``"""
    from tfos_jobs.jobs.sweep.driver import job

    if not (isinstance(space, CheckedSweep) and space.base == config):
        space = search_space.check_sweep(config, space.sweep if isinstance(space, CheckedSweep) else space)
    observer = None
    if config.tracking.enabled:
        from tfos_jobs.jobs.sweep.driver.tracked import MlflowSweepObserver
        from tfos_jobs.storage import Storage

        observer = MlflowSweepObserver(config, Storage(spark), log)
    failed = True
    try:
        outcome = job.run(spark, config, space.sweep, log=log, observer=observer)
        failed = False
    finally:
        if observer is not None:
            observer.close(failed)
    best_model = ModelDir(SweepDir(outcome["dir"]).best) if outcome["best"] else None
    return SweepResult(best=outcome["best"], results=tuple(outcome["results"]), best_model=best_model)
