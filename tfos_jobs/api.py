"""The Python API: prepare, train, sweep and serve from a notebook or a script, one call each.

Every function is keyword-only and typed, checks its settings before any Spark job runs (an
error names the argument or config key), and returns a typed result. The `tfos` commands are
thin clients of these functions. Example (docs/python_api.md, examples/python_api.py)::

    from tfos_jobs import api, config
    from tfos_jobs.config import TrainConfig

    spark = api.session(master="local[2]")
    census = config.load("conf/census.toml")
    manifest = api.prepare(spark, config=census, output="out/dataset", tables={"people": people_df})
    result = api.train(spark, dataset=manifest, model_dir="out/model", model=build, config=TrainConfig(epochs=2))
    predict = api.register(spark, name="predict_income", model=result)
    spark.sql("SELECT predict_income(struct(*)) FROM people").show()

Each step takes what the one before returned (a `Manifest`, a `TrainResult`), or the location;
settings come one way, a typed config (`Config`, or one of its sections). Stable: `__all__`,
the keyword arguments, the results' fields (added to, never changed without a release note).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, cast

from pyspark.sql import DataFrame, SparkSession

from tfos_jobs import config as config_mod
from tfos_jobs.config import Config, PrepareConfig, SparkConfig, SplitConfig, TrainConfig
from tfos_jobs.config.loading import Table, build, build_spec, checked
from tfos_jobs.contracts.dataset import Manifest, Split
from tfos_jobs.contracts.metrics import Metrics, NodeSummary
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.contracts.prediction import PredictionSummary
from tfos_jobs.contracts.trial import TrialResult
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.model.builder import CheckedModel, checked_model, kind_of
from tfos_jobs.search.space import SweepConfig
from udfs.environment import check_workers
from udfs.register import PredictionUdf

if TYPE_CHECKING:
    from tfos_jobs.jobs.stream.driver.job import StreamSummary

__all__ = ["session", "prepare", "train", "sweep", "register", "predict", "stream", "replay", "config_tables",
           "DatasetManifest", "TrainResult", "SweepResult", "PredictionUdf", "PredictionSummary"]

DatasetManifest = Manifest  # a prepared dataset's `_meta/manifest.json`, typed
Log = Callable[[str], None]


def session(*, master: str = "local[2]", app_name: str = "tfos", conf: Mapping[str, str] | None = None,
            packages: Sequence[str] = (), hive: bool = False, remote: str = "") -> SparkSession:
    """A SparkSession with what the package needs on the driver and every executor: the
    TFRecord data source jar, tf-keras, and this interpreter for the Python workers (so a
    script run as `.venv/bin/python script.py`, with no venv activated, works). With `remote`
    (`sc://host:port`, or the SPARK_REMOTE environment variable), a Spark Connect client's
    session instead: no JVM in this process, the server's cluster does the work.

    Returns
    -------
    SparkSession : classic, or a Spark Connect client's; under `spark-submit`, with its own master.

    Stable. Example: ``spark = api.session(master="local-cluster[2,1,2048]")``, or
    ``api.session(remote="sc://spark.example.com:15002")``."""
    from tfos_jobs import session as session_mod

    return session_mod.build(SparkConfig(master=master, app_name=app_name, conf=dict(conf or {}),
                                         packages=tuple(packages), hive=hive, remote=remote))


def prepare(spark: SparkSession, *, output: str, spec: FeatureSpec | Table | None = None,
            config: Config | None = None, tables: Mapping[str, DataFrame] | None = None, main: str | None = None,
            split: SplitConfig | Table | None = None, overwrite: bool = False,
            log: Log = print) -> DatasetManifest:
    """Prepare a dataset (train/eval TFRecords and `_meta/`) at `output` (local, hdfs://, s3a://)
    and return its manifest.

    The rows come from `tables`, DataFrames the caller holds, by source name, and from the
    sources of `config` (a `tfos_jobs.config.load(...)` result) for the names not given; with
    `config`, its `[prepare]` joins, activity and split apply. `spec`: a `FeatureSpec` or the
    `[features]` table as a dict, else the config's. Without a config the table named `main`
    (or the only one) is the rows, split as `split` says (default: a hash of the key, 20% eval).

    Returns
    -------
    DatasetManifest : records per split, rejects, imputations, vocabulary sizes.

    Raises
    ------
    ConfigError : a missing or wrong argument or setting, named, before any Spark job.
    InputError : a source that cannot be read or does not fit the spec, named.

    Stable. Example: ``api.prepare(spark, spec=census.features, tables={"people": df}, output="out/dataset")``"""
    from tfos_jobs.jobs import prepare as prepare_job
    from tfos_jobs.jobs.prepare.rows import dataframe_sources

    tables = dict(tables or {})
    features = _spec(spec) if spec is not None else (config.features if config is not None else None)
    if features is None:
        raise ConfigError("prepare(): give spec= (a FeatureSpec or the [features] table) or config=")
    if config is None:
        if not tables:
            raise ConfigError("prepare(): give tables= (DataFrames by name) or a config= with [sources]")
        if main is None and len(tables) > 1:
            raise ConfigError(f"prepare(): main= must name the table of rows, one of: {', '.join(tables)}")
        prep = PrepareConfig(main=main or next(iter(tables)), output=output)
        base = Config(features=features, sources={}, prepare=prep)
    else:
        prep = dataclasses.replace(config.prepare, output=output, main=main or config.prepare.main)
        base = dataclasses.replace(config, features=features, prepare=prep)
    if split is not None:
        split_cfg = split if isinstance(split, SplitConfig) else build(SplitConfig, dict(split), "split")
        base = dataclasses.replace(base, prepare=dataclasses.replace(base.prepare, split=split_cfg))
    if tables and features.is_sequence:
        raise ConfigError("prepare(): tables= holds rows; a spec of sensor windows reads its files from [sources]")
    check_workers(spark)  # the executors' Python imports this package, or a clear error now
    with dataframe_sources(spark, base, tables) as cfg:
        config_mod.validate(cfg)
        return prepare_job.run(spark, cfg, overwrite=overwrite, log=log)


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
          model: str | Callable[..., Any] | CheckedModel | None = None, config: Config | TrainConfig | None = None,
          overwrite: bool = False, log: Log = print) -> TrainResult:
    """Train on `dataset` and export a SavedModel into `model_dir`; the model is built from the
    dataset's own feature spec.

    Parameters
    ----------
    dataset : the `Manifest` that `prepare` returned, or where it wrote the dataset.
    model_dir : where the model goes (local, hdfs://, s3a://).
    model : "wide_deep" (the default), "sequence_autoencoder", "module:function", or a callable
        `build(spec, vocab, stats, model_cfg) -> tf.keras.Model` (docs/training.md); one defined in a
        script or notebook reaches the TF nodes by value. Its settings (`params`, layers) are
        `config`'s `model`.
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

    Stable (its settings in one `config` since this release). Example: ``api.train(spark, dataset=manifest, model_dir="out/model", model=build, config=TrainConfig(epochs=3))``"""
    from tfos_jobs.cluster.driver import node_inputs
    from tfos_jobs.jobs.train.driver import job, tracked
    from tfos_jobs.storage import Storage

    whole = config if isinstance(config, Config) else None
    settings = checked(config.train if isinstance(config, Config) else config or TrainConfig(), "train")
    where = "train" if whole is not None else "train()"
    storage = Storage(spark)
    tr = _with_handles(settings, dataset=dataset.output if isinstance(dataset, Manifest) else dataset,
                       model_dir=model_dir, kind=None if model is None else kind_of(model)[0],
                       from_config=config is not None, where=where,
                       same=lambda a, b: a == b or storage.qualify(a) == storage.qualify(b))
    meta = node_inputs.read_dataset(storage, "train.dataset" if whole is not None else "dataset", tr.dataset)
    errors = tr.errors(meta.spec)
    if errors:
        raise ConfigError(f"{where}: invalid settings:\n  " + "\n  ".join(errors))
    definition = checked_model(model, tr.model, meta.spec)  # a dry build: a wrong model fails here, once
    check_workers(spark)  # the TF nodes' Python imports this package, or a clear error before they start
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
    check_workers(spark)
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


def register(spark: SparkSession, *, name: str, model: str | TrainResult, batch_size: int | None = None,
             tracking_uri: str | None = None) -> PredictionUdf:
    """Register `name` as a Spark SQL function scoring with the SavedModel trained into `model`
    (what `train` returned, a model directory on any filesystem, or `models:/NAME@alias` in the
    MLflow registry at `tracking_uri`, else MLFLOW_TRACKING_URI); the function also builds
    Columns for the DataFrame API (`udfs.register`, docs/serving.md).

    Returns
    -------
    PredictionUdf : the registered function; `predict(*columns)` builds a Column.

    Raises
    ------
    ConfigError : no SavedModel at `model`, or a name SQL cannot take.

    Stable. Example: ``api.register(spark, name="predict_income", model=result)``, then
    ``spark.sql("SELECT predict_income(struct(*)) FROM people")``."""
    from tfos_jobs.tracking.registry import resolver
    from udfs.register import register as register_udf

    return register_udf(spark, name, _model_dir(model), batch_size=batch_size, setting="model",
                        resolve=resolver(tracking_uri))


def predict(spark: SparkSession, *, config: Config, model: str | TrainResult | None = None,
            overwrite: bool = False, log: Log = print) -> PredictionSummary:
    """Score the rows `config` describes (its `[prepare]` joins, or `predict.source`) with `model`
    (default `predict.model`) and write them with their predictions where `[predict]` says: what
    `tfos predict` does (docs/serving.md). `overwrite` turns `predict.mode = "create"` into
    "overwrite".

    Returns
    -------
    PredictionSummary : where the rows went, how many, the counters (nulls filled, unseen categories).

    Raises
    ------
    ConfigError, InputError : a setting, model or input that does not fit, named, before the write.

    Stable. Example: ``api.predict(spark, config=config.load("conf/census.toml"), model=result).rows``"""
    from tfos_jobs.jobs.serve import predict as predict_job

    if model is not None:
        config = dataclasses.replace(config, predict=dataclasses.replace(config.predict, model=_model_dir(model)))
    config_mod.validate(config)
    check_workers(spark)
    return predict_job.run(spark, config, overwrite=overwrite, log=log)


def _model_dir(model: str | TrainResult) -> str:
    return model.model_dir if isinstance(model, TrainResult) else model


def stream(spark: SparkSession, *, config: Config, log: Log = print) -> "StreamSummary":
    """Score the Kafka topic of `config.stream` as its events arrive, with the model of
    `stream.model` (or `predict.model`), until the stream stops (a signal, or
    `stream.stop_when_idle_seconds` without events); what it did (docs/streaming.md). The session
    needs Spark's Kafka connector (`packages=["org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"]`).

    Returns
    -------
    StreamSummary : micro-batches, events, scored, quarantined by reason, alerts, model versions.

    Raises
    ------
    TfosError : the query failed (naming the micro-batch and the cause) or a setting is wrong.

    Stable. Example: ``api.stream(spark, config=config.load("conf/fleet.toml", ["stream.stop_when_idle_seconds=30"]))``"""
    from tfos_jobs.jobs.stream.driver import job

    check_workers(spark)
    return job.run(spark, config, log=log)


def replay(spark: SparkSession, *, rows: DataFrame, bootstrap_servers: str, topic: str, rate: float,
           key: str | None = None, order_by: str | None = None, disorder: int = 0, partitions: int = 2,
           log: Log = print) -> int:
    """Send `rows` to `topic` as JSON events (one per row, keyed by `key`, in `order_by` order) at
    `rate` events per second, each displaced by up to `disorder` places; the topic is created
    with `partitions` if missing. Returns how many were sent.

    Returns
    -------
    int : events sent.

    Raises
    ------
    ConfigError : a negative rate, or a `key`/`order_by` that is not a column of `rows`.

    Stable. Example: ``api.replay(spark, rows=spark.read.parquet("sensors"), bootstrap_servers="127.0.0.1:9092",
    topic="readings", rate=2000, key="asset_id", order_by="ts")``"""
    from tfos_jobs.jobs.stream.driver import replay as replay_mod

    if rate < 0:
        raise ConfigError(f"replay(): rate= must be >= 0 (0: as fast as the broker takes them), got {rate}")
    for name, column in (("key", key), ("order_by", order_by)):
        if column is not None and column not in rows.columns:
            raise ConfigError(f"replay(): {name}={column!r} is not a column of rows= ({', '.join(rows.columns)})")
    replay_mod.create_topic(bootstrap_servers=bootstrap_servers, topic=topic, partitions=partitions)
    return replay_mod.send(replay_mod.as_events(rows, key, order_by), bootstrap_servers=bootstrap_servers, topic=topic,
                           rate=rate, disorder=disorder, log=log)


def _spec(spec: FeatureSpec | Table) -> FeatureSpec:
    if isinstance(spec, FeatureSpec):
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigError(f"spec=: a FeatureSpec or the [features] table as a dict, got {type(spec).__name__}")
    return build_spec(spec)
