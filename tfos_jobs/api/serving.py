"""The API's serving steps: the model as a SQL function, a table scored and written, a Kafka
topic scored as it arrives (and one filled, for a demo or a test)."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable

from pyspark.sql import DataFrame, SparkSession

from tfos_jobs import config as config_mod
from tfos_jobs.api.training import TrainResult
from tfos_jobs.config import Config
from tfos_jobs.config.predict import Engine
from tfos_jobs.contracts.metrics import Evaluation
from tfos_jobs.contracts.model_dir import ModelDir
from tfos_jobs.contracts.prediction import PredictionSummary
from tfos_jobs.errors import ConfigError, TfosError
from udfs import PredictionUdf, SignatureUdf

if TYPE_CHECKING:
    from tfos_jobs.jobs.serve.baseline import Comparison
    from tfos_jobs.jobs.stream.driver.job import StreamSummary

Log = Callable[[str], None]


def register(spark: SparkSession, *, name: str, model: str | TrainResult | ModelDir, batch_size: int | None = None,
             tracking_uri: str | None = None, engine: Engine = "python") -> PredictionUdf:
    """Register `name` as a Spark SQL function scoring with the SavedModel trained into `model`
    (what `train` returned, a model directory on any filesystem or its `ModelDir`, or
    `models:/NAME@alias` in the MLflow registry at `tracking_uri`, else MLFLOW_TRACKING_URI),
    `batch_size` rows per call; it also builds Columns for the DataFrame API (docs/serving.md).
    `engine` is where it scores: "python" (a Python worker), "jvm" (TensorFlow Java in the executor JVM, no
    Python worker) or "auto" (the JVM when it answers a check batch as Python does, else Python, saying why);
    the same from a classic session and from a Spark Connect client.

    Returns
    -------
    PredictionUdf : the registered function; `predict(*columns)` builds a Column.

    Raises
    ------
    ConfigError : no SavedModel at `model`, or a name SQL cannot take.

    Stable. Example: ``api.register(spark, name="predict_income", model=result)``, then
    ``spark.sql("SELECT predict_income(struct(*)) FROM people")``."""
    from tfos_jobs.tracking.registry import resolver
    from udfs import register as register_udf

    return register_udf(spark, name, _model_dir(model), batch_size=batch_size, setting="model",
                        resolve=resolver(tracking_uri), engine=engine)


def register_saved_model(spark: SparkSession, *, name: str, model: str, signature: str = "serving_default",
                         tracking_uri: str | None = None) -> SignatureUdf:
    """Register `name` as a Spark SQL function scoring with `signature` of any SavedModel at `model` (on any
    filesystem; saved by TensorFlow, tf-keras or Keras 3's `export`, no feature spec needed; or an MLflow model of the
    tensorflow flavour, a directory or `models:/NAME@alias` at `tracking_uri`, else MLFLOW_TRACKING_URI): its
    arguments are the signature's inputs by name, its result the struct of its outputs (docs/serving.md, "Any
    SavedModel in SQL").

    Returns
    -------
    SignatureUdf : the registered function; `signature.inputs` and `.outputs` say what it takes and gives.

    Raises
    ------
    ConfigError : no SavedModel at `model`, no such signature, or one whose graph does not give what it declares.

    Stable. Example: ``api.register_saved_model(spark, name="churn", model="s3a://models/churn")``, then
    ``spark.sql("SELECT churn(tenure, plan).probability FROM customers")``."""
    from tfos_jobs.tracking.registry import resolver
    from udfs import register as register_udf

    return register_udf(spark, name, model, signature=signature, setting="model", resolve=resolver(tracking_uri))


def sql(spark: SparkSession, *, config: Config, script: str = "", file: str = "",
        model: str | TrainResult | ModelDir | None = None, name: str | None = None, log: Log = print) -> DataFrame:
    """Run `script`'s SQL statements, or those of `file` (local, or on the cluster: `hdfs://`, `s3a://`), with the
    prediction function `name` (default `predict.name`) registered on `model` (default `predict.model`) and the config's
    sources as views (`features`, or `windows` for sensor windows): what `tfos sql` does (docs/serving.md).

    Returns
    -------
    DataFrame : the last statement's result, not yet computed.

    Raises
    ------
    ConfigError : both or neither of `script` and `file`; a file that cannot be read, named.
    TfosError : a statement that does not parse or analyse, as one line naming it.

    Stable. Example: ``api.sql(spark, config=census, script="SELECT count(*) FROM features").show()``"""
    from tfos_jobs.jobs.serve import sql as sql_job
    from tfos_jobs.storage import Storage

    if bool(script) == bool(file):
        raise ConfigError("sql(): give the statements as script= or file=, one of them")
    if file:
        try:
            script = Storage(spark).read_text(file)
        except (OSError, TfosError) as e:
            raise ConfigError(f"-f {file}: {getattr(e, 'strerror', None) or e}") from None
    return sql_job.query(spark, config, script, model=None if model is None else _model_dir(model), name=name,
                         log=log)


def evaluate(spark: SparkSession, *, config: Config, scores: str | None = None, truth: str | None = None,
             log: Log = print) -> Evaluation:
    """Judge a sensor model's window scores (`scores`, default `predict.output`, what `predict`
    wrote) against known anomaly intervals (`truth`, default the embedded fleet's), beside six
    baselines computed on the same windows: what `tfos evaluate` does (docs/prepare.md).

    Returns
    -------
    Evaluation : ROC AUC and AUPRC (on windows), VUS-PR and VUS-ROC (on readings, as TSB-AD computes
        them) of the model and each baseline, per asset too, and the alerts' precision and recall; also
        written into the model's metrics.json, with plots.

    Raises
    ------
    ConfigError : `predict.model` is not an autoencoder of sensor windows.
    InputError : a scores or truth table that cannot be read or lacks a column, named.

    Stable. Example: ``api.evaluate(spark, config=config.load("conf/fleet.toml"))["scores"]``"""
    from tfos_jobs.data.fleet import ANOMALIES_DIR
    from tfos_jobs.jobs.serve import evaluate as anomaly_report
    from tfos_jobs.tracking.registry import resolver
    from udfs.model_location import served_spec

    spec = served_spec(spark, config.predict.model, setting="predict.model",
                       resolve=resolver(config.tracking.uri or None))
    if not spec.is_sequence:
        raise ConfigError(f"{config.predict.model!r} is not an autoencoder of sensor windows: nothing to evaluate")
    return anomaly_report.evaluate(spark, config, spec, scores or config.predict.output,
                                   truth or f"{config.fleet.output}/{ANOMALIES_DIR}", log=log)


def baseline(spark: SparkSession, *, config: Config, predictions: str | None = None, log: Log = print) -> "Comparison":
    """Put a classifier's predictions (`predictions`, default `predict.output`, what `predict` wrote) beside what a
    data scientist tries first on the same rows and splits: a bag of the texts' words, the lists' elements and the
    categoricals' values (CountVectorizer, IDF) with the numbers, in a Spark ML logistic regression whose regParam is
    chosen on eval; and beside the majority class. A model is worth its cost only when it beats them on test: what
    `tfos baseline` does (docs/prepare.md).

    Returns
    -------
    Comparison : rows per split, the regParam kept and each one's eval accuracy, and accuracy and macro F1 of the
        majority class, the baseline and the model on eval and test.

    Raises
    ------
    ConfigError : a spec without a key or a multiclass label.
    InputError : predictions that cannot be read or lack the key or `predicted_label`; no train or eval row.

    Stable. Example: ``api.baseline(spark, config=config.load("conf/tate.toml")).figures["model"]["test"]``"""
    from tfos_jobs.jobs.serve import baseline as baseline_job

    config_mod.validate(config)
    return baseline_job.run(spark, config, predictions or config.predict.output, log=log)


def predict(spark: SparkSession, *, config: Config, model: str | TrainResult | ModelDir | None = None,
            overwrite: bool = False, log: Log = print) -> PredictionSummary:
    """Score the rows `config` describes (its `[prepare]` joins, or `predict.source`) with `model` (default
    `predict.model`) and write them with their predictions where `[predict]` says: what `tfos predict` does
    (docs/serving.md). `overwrite` turns `predict.mode = "create"` into "overwrite".

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
    return predict_job.run(spark, config, overwrite=overwrite, log=log)


def _model_dir(model: str | TrainResult | ModelDir) -> str:
    return model.model_dir if isinstance(model, TrainResult) else model.path if isinstance(model, ModelDir) else model


def stream(spark: SparkSession, *, config: Config, log: Log = print) -> "StreamSummary":
    """Score the Kafka topic of `config.stream` as its events arrive, with the model of
    `stream.model` (or `predict.model`), until the stream stops (a signal, or
    `stream.stop_when_idle_seconds` without events); what it did (docs/streaming.md). The session
    needs Spark's Kafka connector (`packages=["org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"]`).

    Returns
    -------
    StreamSummary : micro-batches, events, scored, quarantined by reason, alerts, the prediction function's counters,
    model versions.

    Raises
    ------
    TfosError : the query failed (naming the micro-batch and the cause) or a setting is wrong.

    Stable. Example: ``api.stream(spark, config=config.load("conf/fleet.toml").with_settings({"stream.stop_when_idle_seconds": 30}))``"""
    from tfos_jobs.jobs.stream.driver import job, real_time

    if config.stream.mode == "real_time":  # Spark's real-time trigger, scored in the JVM
        return real_time.run(spark, config, log=log)
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
