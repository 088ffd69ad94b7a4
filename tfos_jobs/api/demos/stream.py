"""`tfos demo-stream`: the fleet's last readings replayed into Kafka at a fixed rate, scored by
`tfos stream` as they arrive (alerts printed as they happen), then the same readings scored in
batch: the stream must have scored the same windows, with the same anomaly ROC AUC.

The fleet model is trained first when there is none (the fleet demo's generate, prepare, train).
The demo's stream outputs and checkpoint start afresh, and so does its topic.
"""
from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.api.data import prepare, replay_rows, session
from tfos_jobs.api.serving import stream
from tfos_jobs.api.training import train
from tfos_jobs.config import Config
from tfos_jobs.contracts import serving
from tfos_jobs.contracts import stream as contract
from tfos_jobs.data import fleet, windows
from tfos_jobs.errors import ConfigError, TfosError
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START
from tfos_jobs.data.anomaly_figures import ANOMALOUS, roc_auc
from tfos_jobs.jobs.serve.evaluate import label
from tfos_jobs.serving.scoring import with_predictions
from tfos_jobs.jobs.stream.driver import batches, replay
from tfos_jobs.jobs.stream.driver.job import StreamSummary
from tfos_jobs.storage import Storage
from tfos_jobs.tracking.registry import resolver
from udfs import register
from udfs.model_location import locate_saved_model

# The last readings of every asset replayed: 32 windows of 64 steps each, then half a window more,
# so that the watermark (10 minutes behind the latest reading) passes the last window's end.
STEPS = 2080
RATE = 8000.0  # events per second
DISORDER = 400  # places an event may move: about 2 minutes of the fleet's time, well within the watermark
IDLE_SECONDS = 30.0  # the stream stops once no event came for this long
AUC_TOLERANCE = 1e-6


def demo_stream(*, config: Config) -> bool:
    """Replay the fleet's last readings into the Kafka topic of `[stream]` while `stream` scores
    them, then score them in batch (training the fleet's model first when there is none): `tfos
    demo-stream`. Returns whether the stream scored the windows batch did, with the same anomaly
    ROC AUC; a config not of sensor windows with a key is a ConfigError.

    Stable. Example: ``api.demo_stream(config=config.load("conf/fleet.toml"))``"""
    spec = config.features
    if not spec.is_sequence or spec.key is None:
        raise ConfigError("demo-stream replays sensor readings: run it with the fleet's config (conf/fleet.toml)")
    spark = session(config=config, kafka=True)
    storage = Storage(spark)
    _ensure_model(spark, config, storage)
    st = config.stream
    for place in (st.output, st.quarantine, st.checkpoint):
        storage.delete(place)
    if st.progress_log:
        storage.delete(st.progress_log)
    time_col, step = spec.time.name, spec.time.step_seconds
    rows = replay_rows(spark, config=config)
    last = rows.agg(F.max(time_col)).first()
    assert last is not None and last[0] is not None  # the fleet was generated
    readings = rows.where(F.col(time_col) >= F.lit(last[0]) - F.expr(f"INTERVAL {STEPS * step} SECONDS")).cache()
    total = readings.count()
    print(f"== replay: the last {STEPS:,} readings of every asset ({total:,} events) into {st.topic} "
          f"at {RATE:,.0f}/s, each moved by up to {DISORDER} places")
    _fresh_topic(st.bootstrap_servers, st.topic)
    sent: list[int] = []
    failed: list[BaseException] = []

    def produce() -> None:
        try:
            sent.append(replay.send(replay.as_events(readings, spec.key.name if spec.key else None, time_col),
                                    bootstrap_servers=st.bootstrap_servers, topic=st.topic, rate=RATE,
                                    disorder=DISORDER, log=lambda line: print(line, flush=True)))
        except BaseException as e:  # reported by the main thread
            failed.append(e)

    producer = threading.Thread(target=produce, name="tfos-replay", daemon=True)
    producer.start()
    print(f"== stream: {st.topic} -> {st.output}, alerts as they happen")
    streaming = dataclasses.replace(config, stream=dataclasses.replace(st, stop_when_idle_seconds=IDLE_SECONDS))
    summary = stream(spark, config=streaming, log=lambda line: print(line, flush=True))
    producer.join()
    if failed:
        raise TfosError(f"demo-stream: the replay failed: {failed[0]}")
    print("== compare: the stream's windows and scores with batch scoring of the same readings")
    report = compare(spark, config, readings, f"{config.fleet.output}/{fleet.ANOMALIES_DIR}")
    readings.unpersist()
    for line in describe(report, summary):
        print(line)
    return bool(report["same"])


def _ensure_model(spark: SparkSession, config: Config, storage: Storage) -> None:
    try:
        locate_saved_model(storage, config.predict.model, setting="predict.model",
                           resolve=resolver(config.tracking.uri or None))
        return
    except ConfigError:
        pass
    print(f"== no model in {config.predict.model}: the fleet pipeline first (generate, prepare, train)")
    fleet.write(config, lambda: spark)
    manifest = prepare(spark, config=config, output=config.prepare.output, overwrite=True)
    train(spark, dataset=manifest, config=config, overwrite=True)


def _fresh_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        admin.delete_topics([topic])[topic].result(timeout=60)
        for _ in range(120):  # deletion completes in the background
            if topic not in admin.list_topics(timeout=30).topics:
                break
            time.sleep(0.5)
    replay.create_topic(bootstrap_servers=bootstrap, topic=topic, partitions=2)


def compare(spark: SparkSession, config: Config, readings: DataFrame, truth_path: str) -> dict[str, Any]:
    """The stream's scored windows against batch scoring of `readings`: the same windows, the
    largest score difference, and each side's anomaly ROC AUC over the known intervals."""
    spec = config.features
    assert spec.key is not None  # checked by run
    key = spec.key.name
    udf = register(spark, config.predict.name, config.stream.model or config.predict.model, setting=batches.SETTING,
                   batch_size=config.predict.batch_size, resolve=resolver(config.tracking.uri or None))
    batch = with_predictions(windows.as_timestamps(windows.usable(windows.all_windows(readings, spec))), udf)
    streamed = spark.read.parquet(config.stream.output)
    truth = spark.read.parquet(truth_path)
    sides: dict[str, pd.DataFrame] = {}
    for name, scores in (("stream", streamed), ("batch", batch)):
        sides[name] = label(scores.select(key, WINDOW_START, WINDOW_END, serving.RECONSTRUCTION_ERROR), truth, key) \
            .select(key, WINDOW_START, serving.RECONSTRUCTION_ERROR, ANOMALOUS).toPandas()
    joined = sides["stream"].merge(sides["batch"], on=[key, WINDOW_START], how="outer", suffixes=("_s", "_b"),
                                   indicator=True)
    both = joined[joined["_merge"] == "both"]
    error = serving.RECONSTRUCTION_ERROR
    aucs = {name: roc_auc(side[ANOMALOUS].to_numpy(), side[error].to_numpy(np.float64)) for name, side in sides.items()}
    delays: pd.DataFrame = streamed.select(
        (F.unix_micros(contract.SCORED_AT) - F.unix_micros(contract.EVENT_TIMESTAMP)).alias("us")).toPandas()
    latency = delays["us"] / 1e6
    report = {
        "windows": {name: len(side) for name, side in sides.items()},
        "only_stream": int((joined["_merge"] == "left_only").sum()),
        "only_batch": int((joined["_merge"] == "right_only").sum()),
        "max_score_difference": float(np.abs(both[f"{error}_s"] - both[f"{error}_b"]).max()) if len(both) else None,
        "anomalous": int(sides["batch"][ANOMALOUS].sum()),
        "auc": aucs,
        "latency_seconds": {"p50": float(latency.quantile(0.5)), "p99": float(latency.quantile(0.99))}
        if len(latency) else None,
    }
    report["same"] = bool(report["only_stream"] == 0 and report["only_batch"] == 0 and aucs["stream"] is not None
                          and aucs["batch"] is not None and abs(aucs["stream"] - aucs["batch"]) <= AUC_TOLERANCE)
    return report


def describe(report: dict[str, Any], summary: StreamSummary) -> list[str]:
    aucs, w = report["auc"], report["windows"]
    lines = [f"stream: {w['stream']:,} windows scored, {summary.alerts:,} alerts, "
             f"{sum(summary.quarantined.values()):,} events or windows quarantined",
             f"batch:  {w['batch']:,} windows from the same readings ({report['anomalous']:,} overlap a true anomaly)",
             f"windows only in the stream: {report['only_stream']:,}, only in batch: {report['only_batch']:,}; "
             f"largest score difference {report['max_score_difference']}",
             f"anomaly ROC AUC: stream {aucs['stream']}, batch {aucs['batch']}: "
             + ("the same" if report["same"] else "DIFFERENT")]
    if report["latency_seconds"]:
        lat = report["latency_seconds"]
        lines.append(f"latency from a window's last reading in Kafka to its score: p50 {lat['p50']:.2f} s, "
                     f"p99 {lat['p99']:.2f} s")
    return lines
