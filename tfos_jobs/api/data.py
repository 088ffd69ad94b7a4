"""The API's first steps: a session, and a prepared dataset."""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession

from tfos_jobs import config as config_mod
from tfos_jobs.config import Config, PrepareConfig, SparkConfig, SplitConfig
from tfos_jobs.config.loading import Table, build, build_spec
from tfos_jobs.contracts.dataset import Manifest
from tfos_jobs.errors import ConfigError
from tfos_jobs.features.spec import FeatureSpec

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
    with dataframe_sources(spark, base, tables) as cfg:
        config_mod.validate(cfg)
        return prepare_job.run(spark, cfg, overwrite=overwrite, log=log)


def _spec(spec: FeatureSpec | Table) -> FeatureSpec:
    if isinstance(spec, FeatureSpec):
        return spec
    if not isinstance(spec, Mapping):
        raise ConfigError(f"spec=: a FeatureSpec or the [features] table as a dict, got {type(spec).__name__}")
    return build_spec(spec)
