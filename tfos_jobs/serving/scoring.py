"""Rows scored by the prediction function: the rows a config describes, checked against the model's inputs, and a table
with the prediction columns appended (`tfos predict`, `tfos stream`).

The input is the main source joined with its lookups and aggregates exactly as `prepare` does it (so serving cannot be fed
differently from training), or any configured source that already holds the feature columns."""
from __future__ import annotations

import dataclasses

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config
from tfos_jobs.contracts import serving as contract
from tfos_jobs.data import sources
from tfos_jobs.data.assemble import assemble
from tfos_jobs.errors import InputError
from udfs import PredictionUdf


def input_table(spark: SparkSession, config: Config, spec) -> DataFrame:
    """The rows to score, checked for every model input before any job runs."""
    name = config.predict.input
    if spec.is_sequence:
        from tfos_jobs.data.sensor_sources import window_table

        return window_table(spark, config, spec, name)
    if name is None:
        table, _ = assemble(spark, dataclasses.replace(config, features=spec), for_prediction=True)
        return table
    src = config.sources[name]
    table = sources.read(spark, name, src)
    errors = spec.input_type_errors(sources.column_types(table), spec.model_inputs)
    if errors:
        raise InputError(f"source {name!r} ({src.location()}) does not fit the model:\n  " + "\n  ".join(m for _, m in errors))
    return table


def with_predictions(table: DataFrame, udf: PredictionUdf, counted: list[Observation] | None = None) -> DataFrame:
    """The table with `predicted_probability` and `predicted_label` (or `prediction`) appended.
    With `counted`, the scoring's counters are observed too (the observation is appended to it)."""
    task = contract.task_of(udf.spec)
    if counted is None:
        scored = table.withColumn("__prediction", udf())
    else:
        scored, seen = udf.counted(table, "__prediction")
        counted.append(seen)
    if not contract.udf_returns_struct(task):
        return scored.withColumnRenamed("__prediction", contract.PREDICTION)
    if task == contract.AUTOENCODER:  # one row per window: its bounds and scores, not its values again
        windows = {f.name for f in udf.spec.sequences}
        keep = [c for c in table.columns if c not in windows]
        return scored.select(*keep, *(F.col(f"__prediction.{field}").alias(field)
                                      for field in contract.UDF_FIELDS[task]))
    return scored.select("*", *(F.col(f"__prediction.{field}").alias(contract.predicted(field))
                                for field in contract.UDF_FIELDS[task])).drop("__prediction")
