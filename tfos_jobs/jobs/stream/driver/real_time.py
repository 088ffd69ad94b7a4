"""`tfos stream` under Spark's real-time trigger (`stream.mode = "real_time"`): Kafka in, each event scored inside the
executor JVM as it arrives (`udfs.real_time`), Kafka out, in milliseconds rather than a micro-batch's seconds.

The events hold the model's inputs themselves (`stream.schema`, or by default the key and the model's inputs as JSON
holds them): real-time mode admits no shuffle-free join with the aggregates `tfos predict` computes, no Python and no
state, so sensor readings (cut into windows per asset, in state) are refused. Each scored event goes to
`stream.output_topic` as a JSON object of its key, the prediction's fields, the model's version and its Kafka
timestamp; an event that cannot be scored goes there too, with its reason and its raw value: nothing is dropped.

Delivery is at least once: the query commits its Kafka offsets at the end of each real-time batch
(`stream.real_time_batch_seconds`), and a stopped or failed run started again with the same checkpoint reads again
from the last commit, so events scored after it are sent again (same key).
"""
from __future__ import annotations

import dataclasses
import signal
import threading
import time
from typing import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, DoubleType, StringType, StructField, StructType

from tfos_jobs.config import Config
from tfos_jobs.contracts import serving
from tfos_jobs.contracts import stream as contract
from tfos_jobs.errors import ConfigError, TfosError
from tfos_jobs.features.spec import FeatureSpec, ListFeature, NumericFeature, VectorFeature
from tfos_jobs.jobs.stream.driver import events
from tfos_jobs.jobs.stream.driver.job import StreamSummary, failure_line
from tfos_jobs.storage import Storage
from tfos_jobs.tracking.registry import resolver

QUERY_NAME = "tfos_stream_real_time"
# The output producer gathers what is sent within this many ms into one request (Kafka 4's default; the 3.x client Spark
# ships waits 0): a request per scored event costs the broker and the producer more CPU than the events themselves.
# Each record's timestamp is taken when it is sent, before the wait.
LINGER_MS = 5
# Spark writes each entry of a checkpoint's logs to a hidden temporary file (".0.<uuid>.tmp", and its ".crc" on a local
# disk) and renames it into place: a run killed between the two leaves the temporary file, and when no batch had been
# committed yet the next start refuses the checkpoint ("commits should be empty on batch 0"). No query runs on the
# checkpoint when this one starts, so such files are debris.
CHECKPOINT_LOGS = ("commits", "offsets")
REMOVED_LEFTOVERS = "unfinished write(s) a stopped run left in"  # the line saying so: "removed N ... CHECKPOINT: PATHS"
PREDICTION = "__prediction"
POLL_SECONDS = 0.5
REFUSED = ("stream.mode: \"real_time\" keeps no state, and a sensor model's windows are cut per asset from the readings "
           "before them (state): score sensor readings with stream.mode = \"micro_batch\"")


def event_schema(config: Config, spec: FeatureSpec) -> StructType:
    """`stream.schema`, or the key and the model's inputs as a JSON object holds them."""
    if config.stream.schema:
        return events.given_schema(config.stream.schema)
    fields = [StructField(spec.key.name, StringType())] if spec.key is not None else []
    for name in spec.model_inputs:
        f = spec.get(name)
        kind: DataType = DoubleType() if isinstance(f, NumericFeature) else \
            ArrayType(StringType()) if isinstance(f, ListFeature) else \
            ArrayType(DoubleType()) if isinstance(f, VectorFeature) else StringType()
        fields.append(StructField(name, kind))
    return StructType(fields)


def outgoing(scored: DataFrame, spec: FeatureSpec, version: str) -> DataFrame:
    """Kafka records (key, value): a scored event's prediction, or an unscored one's reason and raw value."""
    key = F.col(spec.key.name).cast("string") if spec.key is not None else F.lit(None).cast("string")
    task = serving.task_of(spec)
    fields = [F.col(f"{PREDICTION}.{f}").alias(serving.predicted(f)) for f in serving.UDF_FIELDS[task]] \
        if serving.udf_returns_struct(task) else [F.col(PREDICTION).alias(serving.PREDICTION)]
    keyed = [key.alias(spec.key.name)] if spec.key is not None else []
    good = F.to_json(F.struct(*keyed, *fields, F.lit(version).alias(contract.MODEL_VERSION),
                              F.col(contract.EVENT_TIMESTAMP)))
    bad = F.to_json(F.struct(*keyed, F.col(contract.REASON), F.col(contract.DETAIL), F.col(contract.RAW),
                             F.col(contract.EVENT_TIMESTAMP)))
    return scored.select(key.alias("key"), F.when(F.col(contract.REASON).isNull(), good).otherwise(bad).alias("value"))


def unfinished_log_writes(storage: Storage, checkpoint: str) -> list[str]:
    """The temporary files of log entries a killed run was writing (CHECKPOINT_LOGS)."""
    return [f"{checkpoint.rstrip('/')}/{d}/{name}" for d in CHECKPOINT_LOGS
            for name in storage.children(f"{checkpoint.rstrip('/')}/{d}")
            if name.startswith(".") and name.endswith((".tmp", ".tmp.crc"))]


def run(spark: SparkSession, config: Config, *, log: Callable[[str], None] = print) -> StreamSummary:
    from udfs import real_time, register

    st = config.stream
    started = time.time()
    if config.features.is_sequence:
        raise ConfigError(REFUSED)
    udf = register(spark, config.predict.name, st.model or config.predict.model, engine="jvm",
                   setting="stream.model", resolve=resolver(config.tracking.uri or None))
    if udf.spec.is_sequence:
        raise ConfigError(REFUSED)
    # a real-time batch reads what arrives until it ends: no limit on offsets per batch
    records = events.read(spark, dataclasses.replace(config, stream=dataclasses.replace(st, max_offsets_per_trigger=0)))
    parsed = events.parsed(records, event_schema(config, udf.spec), udf.spec)
    scored = real_time.scored(parsed, udf, column=PREDICTION, skip=contract.REASON)
    storage = Storage.as_spark_sees(spark)
    checkpoint = storage.qualify(st.checkpoint)
    leftovers = unfinished_log_writes(storage, checkpoint)
    for path in leftovers:
        storage.delete(path)
    if leftovers:
        log(f"removed {len(leftovers)} {REMOVED_LEFTOVERS} {checkpoint}: {', '.join(leftovers)}")
    writer = outgoing(scored, udf.spec, udf.version).writeStream.queryName(QUERY_NAME).format("kafka") \
        .option("kafka.bootstrap.servers", st.bootstrap_servers).option("topic", st.output_topic) \
        .option("checkpointLocation", checkpoint).outputMode("update").option("kafka.linger.ms", str(LINGER_MS))
    for key, value in st.kafka.items():  # the user's settings win, linger.ms among them
        writer = writer.option(f"kafka.{key.removeprefix('kafka.')}", value)
    # pyspark's type hints list every trigger but the real-time one (4.1+)
    running = writer.trigger(realTime=f"{st.real_time_batch_seconds:g} seconds").start()  # type: ignore[call-overload]
    log(f"streaming {st.topic} ({st.bootstrap_servers}) -> {st.output_topic} in real time; model {udf.version} "
        f"({udf.export_dir}) in the executor JVM; checkpoint {checkpoint}")
    signalled: list[str] = []
    previous = {s: signal.signal(s, lambda signum, _: signalled.append(signal.Signals(signum).name))
                for s in (signal.SIGINT, signal.SIGTERM)} if threading.current_thread() is threading.main_thread() else {}
    try:
        while running.isActive and not signalled and running.exception() is None:
            time.sleep(POLL_SECONDS)
    finally:
        if running.isActive:
            running.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
    failure = running.exception()
    if failure is not None:
        raise TfosError(f"stream: the real-time query failed: {failure_line(failure)}")
    summary = StreamSummary(model_versions=[udf.version], seconds=round(time.time() - started, 1),
                            stopped_by=signalled[0] if signalled else "the query ended")
    summary.batches = len(running.recentProgress)
    summary.events = sum(int(p.numInputRows or 0) for p in running.recentProgress)
    # Spark reports a real-time batch's events when the batch ends: those of the batch running at the stop went out as
    # they were scored, uncounted
    log(f"stream stopped ({summary.stopped_by}) after {summary.seconds} s: {summary.batches:,} real-time batch(es) "
        f"ended, {summary.events:,} events in them; the events of the batch running at the stop (it would have ended "
        f"after {st.real_time_batch_seconds:g} s) are not counted here")
    return summary
