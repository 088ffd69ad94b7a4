"""The streaming query's table, before scoring: what each micro-batch hands to `batches`.

Rows: each event joined with the static tables as `tfos predict` joins its input (the lookups and aggregates of
`[prepare]`). Sensor readings: cut into windows per asset in Spark's state (`executor.window_state`), watermarked by
their time. Either way the events that cannot be scored come along, with their reason, in the same table.
"""
from __future__ import annotations

import dataclasses

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupStateTimeout

from tfos_jobs.config import Config
from tfos_jobs.contracts import stream as contract
from tfos_jobs.data.assemble import assemble
from tfos_jobs.data.windows import WindowParams
from tfos_jobs.features.spec import FeatureSpec
from tfos_jobs.jobs.stream.driver import events
from tfos_jobs.jobs.stream.executor import window_state

SECONDS = "_seconds"  # a reading's time in epoch seconds, as the state function takes it


def quarantined() -> Column:
    """Events with a reason not to score them."""
    return F.col(contract.REASON).isNotNull()


def table(spark: SparkSession, config: Config, spec: FeatureSpec) -> DataFrame:
    """The stream's rows to score and to set aside (`reason` set), unscored. Every event goes
    one way through the plan (no union of two branches), so the topic is read once per batch."""
    parsed = events.parsed(events.read(spark, config), events.schema(spark, config, spec), spec)
    if spec.is_sequence:
        return _windows(parsed, config, spec)
    if contract.RAW not in config.predict.keep:
        # The event as it came is written only for what is quarantined: an event to score does
        # not carry its text through the join's shuffle.
        parsed = parsed.withColumn(contract.RAW, F.when(quarantined(), F.col(contract.RAW)))
    joined, _ = assemble(spark, dataclasses.replace(config, features=spec), for_prediction=True, main=parsed)
    return joined


def _windows(parsed: DataFrame, config: Config, spec: FeatureSpec) -> DataFrame:
    params = WindowParams.from_spec(spec)
    # The watermarked time column goes along as it is (a cast would drop its watermark); the
    # state function cuts on its epoch seconds. Events with a reason pass through it as they are.
    readings = parsed.withWatermark(params.time, f"{config.stream.watermark_seconds} seconds") \
        .select(params.key, params.time, F.col(params.time).cast("long").alias(SECONDS),
                *[F.col(s).cast("double").alias(s) for s in params.sensors], contract.EVENT_TIMESTAMP, contract.RAW,
                contract.REASON, contract.DETAIL)
    idle_ms = max(int(config.stream.trigger_seconds * 1000), 1)
    return readings.groupBy(params.key).applyInPandasWithState(
        window_state.state_function(dataclasses.replace(params, time=SECONDS), idle_ms),
        window_state.output_schema(spec), window_state.STATE_SCHEMA, "append", GroupStateTimeout.ProcessingTimeTimeout)
