"""The API's first steps: a session, the embedded data, the sources checked, a prepared dataset."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession

from tfos_jobs import config as config_mod
from tfos_jobs import session_builder
from tfos_jobs.config import Config, PrepareConfig, SparkConfig, SplitConfig, TrainConfig
from tfos_jobs.config.loading import Table, build, build_spec
from tfos_jobs.contracts.dataset import Manifest
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FeatureSpec

DatasetManifest = Manifest  # a prepared dataset's `_meta/manifest.json`, typed
Log = Callable[[str], None]
LOCAL = "local[2]"  # the master of a session given none


def session(*, master: str = LOCAL, app_name: str = "tfos", conf: Mapping[str, str] | None = None,
            packages: Sequence[str] = (), hive: bool = False, remote: str = "", kafka: bool = False,
            config: Config | TrainConfig | None = None) -> SparkSession:
    """A SparkSession with what the package needs on the driver and every executor: the TFRecord data source jar,
    tf-keras, and this interpreter for the Python workers (so a script run as `.venv/bin/python script.py`, with no venv
    activated, works). With `remote` (`sc://host:port`, or SPARK_REMOTE), a Spark Connect client's session instead.
    `kafka`: with Spark's Kafka connector, for `stream`. `config`: a loaded `Config`, whose `[spark]` replaces the other
    arguments (`conf` is added to it), or a `TrainConfig`; either's `gpus_per_worker` asks for each TF node's GPUs,
    which Spark gives executors only as the context starts.

    Returns
    -------
    SparkSession : classic, or a Spark Connect client's; under `spark-submit`, with its own master.

    Raises
    ------
    ConfigError : `config` and an argument it holds both given; a jar that is missing.

    Stable. Example: ``spark = api.session(master="local-cluster[2,1,2048]")``, ``api.session(remote=
    "sc://spark.example.com:15002")``, or ``api.session(config=census)``, as every `tfos` command starts."""
    from tfos_jobs.jobs.train.driver.gpu import gpu_conf

    asked = SparkConfig(master=master, app_name=app_name, conf=dict(conf or {}), packages=tuple(packages),
                        hive=hive, remote=remote)
    if isinstance(config, Config):
        if dataclasses.replace(asked, conf={}) != SparkConfig(master=LOCAL):
            raise ConfigError("session(): master, app_name, packages, hive and remote come from config= (its "
                              "[spark]): give them one way")
        asked = dataclasses.replace(config.spark, conf={**config.spark.conf, **asked.conf})
    train = config.train if isinstance(config, Config) else config
    gpus = gpu_conf(train) if train is not None else {}
    return session_builder.build(session_builder.with_kafka_connector(asked) if kafka else asked, gpus)


def generate(spark: SparkSession | None = None, *, config: Config) -> None:
    """Write the embedded data of `config`, the census-like tables of `[synthetic]` or, for sensor windows, the fleet of
    `[fleet]`, and print what went where (`tfos generate`). `spark` (default `session(config=config)`) starts only when
    needed: the fleet is written on this machine, and sent through Spark only to another filesystem.

    Returns
    -------
    None : the data is at `synthetic.output` (or `fleet.output`).

    Stable. Example: ``api.generate(config=config.load("conf/census.toml", ["synthetic.people=5000"]))``"""
    from tfos_jobs.data import fleet, synthetic

    if config.features.is_sequence:
        return fleet.write(config, lambda: spark or session(config=config))
    syn = config.synthetic
    counts = synthetic.generate(spark or session(config=config), syn.output, syn.people, syn.events_per_person,
                                syn.seed, syn.as_of)
    print(f"wrote {syn.output}: " + ", ".join(f"{k} {v:,} rows" for k, v in counts.items()))


def check_sources(spark: SparkSession, *, config: Config, only: Sequence[str] = (), count: bool = True,
                  log: Log = print) -> dict[str, Any]:
    """Read each source of `config` (or of `only`) as `prepare` does and log its columns, rows
    (unless not `count`: no Spark job), read tasks, files, pruned partitions and pushed filters;
    all read, check that their rows give every feature (`tfos sources`, docs/prepare.md).

    Returns
    -------
    dict : `sources` (a report each, with its `error`), `spec_error` and `ok`; as JSON takes it.

    Raises
    ------
    TfosError : `only` names no source of the config.

    Stable. Example: ``api.check_sources(spark, config=config.load("conf/census_warehouse.toml"))["ok"]``"""
    from tfos_jobs.jobs.prepare import source_report

    return source_report.run(spark, config, list(only) or None, count=count, log=log)


def replay_rows(spark: SparkSession, *, config: Config, source: str | None = None,
                where: str | None = None) -> DataFrame:
    """The rows `tfos replay` sends, for `replay(rows=...)`: those of `source` (default `prepare.main`;
    sensor readings with its unions, as key, time and sensors) where the SQL condition `where` holds.

    Returns
    -------
    DataFrame : not yet computed.

    Raises
    ------
    ConfigError : no such source, or a condition that does not analyse.

    Stable. Example: ``api.replay_rows(spark, config=config.load("conf/fleet.toml"), where="ts >= '2026-01-10'")``"""
    from tfos_jobs.jobs.stream.driver.replay import source_rows

    return source_rows(spark, config, source, where)


def prepare(spark: SparkSession, *, output: str, spec: FeatureSpec | Table | None = None,
            config: Config | None = None, tables: Mapping[str, DataFrame] | None = None, main: str | None = None,
            split: SplitConfig | Table | None = None, overwrite: bool = False,
            log: Log = print) -> DatasetManifest:
    """Prepare a dataset (train/eval TFRecords and `_meta/`) at `output` (local, hdfs://, s3a://)
    and return its manifest.

    The rows come from `tables`, DataFrames the caller holds, by source name, and from the sources of `config` (a
    `tfos_jobs.config.load(...)` result) for the names not given; with `config`, its `[prepare]` joins, activity,
    aggregates and split apply, and a table of aggregates built as a DataFrame joins through a lookup of its name
    (docs/prepare.md, "Aggregates you write"). `spec`: a `FeatureSpec` or the `[features]` table as a dict, else the
    config's. Without a config the table named `main` (or the only one) is the rows, split as `split` says (default: a
    hash of the key, 20% eval).

    Returns
    -------
    DatasetManifest : records per split, rejects, imputations, vocabulary sizes.

    Raises
    ------
    ConfigError : a missing or wrong argument or setting, named, before any Spark job.
    InputError : a source that cannot be read or does not fit the spec, named.

    Stable. Example: ``api.prepare(spark, spec=census.features, tables={"people": df}, output="out/dataset")``"""
    from tfos_jobs.data.dataset import summary
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
    with dataframe_sources(spark, base, tables) as sourced:
        config_mod.validate(sourced)
        manifest = prepare_job.run(spark, sourced, overwrite=overwrite, log=log)
    log(summary(manifest))
    return manifest


def _spec(spec: FeatureSpec | Table) -> FeatureSpec:
    if isinstance(spec, FeatureSpec):
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigError(f"spec=: a FeatureSpec or the [features] table as a dict, got {type(spec).__name__}")
    return build_spec(spec)
