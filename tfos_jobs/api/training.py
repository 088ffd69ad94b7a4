"""The API's training steps: a model trained on a prepared dataset, and a sweep of trainings."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, cast

from pyspark.sql import SparkSession

from tfos_jobs import config as config_mod
from tfos_jobs.config import Config, TrainConfig
from tfos_jobs.config.loading import Table, checked
from tfos_jobs.contracts.dataset import Manifest, Split
from tfos_jobs.contracts.metrics import Metrics, NodeSummary
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.contracts.trial import TrialResult
from tfos_jobs.errors import ConfigError
from tfos_jobs.model.builder import CheckedModel, checked_model, kind_of
from tfos_jobs.search.space import SweepConfig

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
          build: str | Callable[..., Any] | CheckedModel | None = None, config: Config | TrainConfig | None = None,
          overwrite: bool = False, log: Log = print) -> TrainResult:
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
    settings = checked(config.train if isinstance(config, Config) else config or TrainConfig(), "train")
    where = "train" if whole is not None else "train()"
    storage = Storage(spark)
    tr = _with_handles(settings, dataset=dataset.output if isinstance(dataset, Manifest) else dataset,
                       model_dir=model_dir, kind=None if build is None else kind_of(build)[0],
                       from_config=config is not None, where=where,
                       same=lambda a, b: a == b or storage.qualify(a) == storage.qualify(b))
    meta = node_inputs.read_dataset(storage, "train.dataset" if whole is not None else "dataset", tr.dataset)
    errors = tr.errors(meta.spec)
    if errors:
        raise ConfigError(f"{where}: invalid settings:\n  " + "\n  ".join(errors))
    definition = checked_model(build, tr.model, meta.spec)  # a dry build: a wrong model fails here, once
    if whole is not None:
        metrics = tracked.run(spark, dataclasses.replace(whole, train=tr), overwrite=overwrite, log=log,
                              model=definition, meta=meta)
    else:
        metrics = job.run(spark, tr, overwrite=overwrite, log=log, model=definition, meta=meta)
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
    `results.parquet` holds them (`contracts.trial.TrialResult`)."""

    best: TrialResult | None
    results: tuple[TrialResult, ...]


def sweep(spark: SparkSession, *, config: Config | Table | str, space: SweepConfig | Table,
          overrides: Sequence[str] = (), log: Log = print) -> SweepResult:
    """A hyperparameter sweep whose trials run as Spark tasks (docs/sweeps.md).

    `config`: the base config (a `Config`, its tables as a dict, or a TOML path); `space`: a
    `SweepConfig` or the sweep file's tables, e.g. ``{"sweep": {"dir": "out/sweep", "max_trials": 4},
    "params": {"train.learning_rate": {"type": "float", "low": 1e-4, "high": 1e-2, "scale": "log"}}}``.

    With the base config's `[tracking]` enabled, the sweep and each trial are MLflow runs
    (docs/tracking.md), as `tfos sweep` logs them.

    Returns
    -------
    SweepResult : the best trial's row and every trial's (`contracts.trial.TrialResult`).

    Raises
    ------
    ConfigError : a wrong space or base config, or a model a trial would build that fails its dry
        build, before any Spark job.

    Stable. Example: ``api.sweep(spark, config=config.load("conf/census.toml"), space=space).best``"""
    from tfos_jobs.jobs.sweep.driver import job
    from tfos_jobs.search import space as space_mod

    base = config_tables(config) if isinstance(config, Config) else config
    definition = space if isinstance(space, SweepConfig) else space_mod.from_tables(space, (), base, overrides)
    space_mod.check_models(base, overrides, definition)  # every model the trials build, by a dry build
    loaded = space_mod.base(base, overrides)  # the trials' base config, loaded: its [tracking]
    if not loaded.tracking.enabled:
        outcome = job.run(spark, base, list(overrides), definition, log=log)
        return SweepResult(best=outcome["best"], results=tuple(outcome["results"]))
    from tfos_jobs.jobs.sweep.driver.tracked import MlflowSweepObserver
    from tfos_jobs.storage import Storage

    observer = MlflowSweepObserver(loaded, Storage(spark), log)
    failed = True
    try:
        outcome = job.run(spark, base, list(overrides), definition, log=log, observer=observer)
        failed = False
    finally:
        observer.close(failed)
    return SweepResult(best=outcome["best"], results=tuple(outcome["results"]))


def config_tables(config: Config) -> dict[str, object]:
    """A Config as the tables of its TOML file (what `config.from_dict` reads back). Stable."""
    tables = config_mod.to_dict(config)
    tables["features"] = {f["name"]: {k: v for k, v in f.items() if k != "name"} for f in tables["features"]}
    return tables
