"""The prediction function on a stream under Spark's real-time trigger (`trigger(realTime=...)`: Kafka in, Kafka out,
each event scored as it arrives).

Real-time mode admits only the operators of its allow-list: no Python UDF, no `foreachBatch`, and no batch-evaluation
operator of the package's either. So the rows are scored by TensorFlow Java inside a typed `mapPartitions`
(`tfos.udf.jvm.RealTimeScoring`): the task scores whatever rows have arrived, up to `flush_rows`, waiting at most
`flush_millis` after the first for more, and each row goes out as soon as its batch is scored. Stateless only: the
per-asset windows of sensor readings are state, which this path refuses.

    predict = register(spark, "predict_income", model, engine="jvm")
    scored = real_time.scored(events, predict, column="prediction")
    scored.writeStream.format("kafka")...trigger(realTime="1 minute").outputMode("update").start()
"""
from __future__ import annotations

from pyspark.sql import DataFrame

from tfos_jobs import sessions
from tfos_jobs.errors import ConfigError
from udfs import jvm_engine, shipping
from udfs.registration import PredictionUdf

FLUSH_ROWS = 500  # rows per TensorFlow call at most
FLUSH_MILLIS = 5  # how long a batch waits for more rows after its first


def scored(df: DataFrame, udf: PredictionUdf, *, column: str, skip: str = "", flush_rows: int = FLUSH_ROWS,
           flush_millis: int = FLUSH_MILLIS) -> DataFrame:
    """`df` (holding the model's input columns by name) with the prediction as `column`, scored in the executor JVM;
    rows whose `skip` column is set are not scored (null). Every row goes on: real-time mode refuses a union of a
    source with itself, so scored and unscored rows travel one path."""
    if udf.spec.is_sequence:
        raise ConfigError("real-time mode scores each event as it comes and keeps no state: a sensor model's windows "
                          "are cut per asset from the readings before them (state), which it cannot keep; score "
                          "sensor readings with micro-batches (stream.mode = \"micro_batch\")")
    if udf.engine != "jvm":
        raise ConfigError(f"{udf.name}: real-time mode admits no Python UDF; register the function with engine \"jvm\""
                          + (f" (it scores in Python: {udf.engine_reason})" if udf.engine_reason else ""))
    if sessions.is_connect(df.sparkSession):
        raise ConfigError("real-time scoring is built on the driver's JVM: run it with `tfos stream` "
                          "(stream.mode = \"real_time\") or from a classic session")
    plan = jvm_engine.plan_json(udf.spec, shipping.ShippedModel(shipping.archive_name(udf.version), udf.version),
                                batch_size=flush_rows)
    jvm = df.sparkSession.sparkContext._jvm
    assert jvm is not None  # a classic session's driver
    jdf = jvm.tfos.udf.jvm.RealTimeScoring.score(df._jdf, plan, column, flush_rows, flush_millis, skip)
    return DataFrame(jdf, df.sparkSession)
