"""Batch prediction (driver side): input rows + prediction columns, rows out = rows in.

The input is the main source joined with its lookups and activity exactly as `prepare` does
it (so serving cannot be fed differently from training), or any configured source that
already holds the feature columns.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config
from tfos_jobs.contracts import serving as contract
from tfos_jobs.contracts.prediction import PredictionSummary, summary_file
from tfos_jobs.data import sources
from tfos_jobs.jobs.serve import prediction_output as output
from tfos_jobs.jobs.serve.sql import query_errors
from tfos_jobs.data.assemble import assemble
from tfos_jobs.errors import ConfigError, InputError
from tfos_jobs.tracking.registry import resolver
from udfs import PredictionUdf, register


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
        keep = [c for c in table.columns if c not in udf.spec.model_inputs]
        return scored.select(*keep, *(F.col(f"__prediction.{field}").alias(field)
                                      for field in contract.UDF_FIELDS[task]))
    return scored.select("*", *(F.col(f"__prediction.{field}").alias(contract.predicted(field))
                                for field in contract.UDF_FIELDS[task])).drop("__prediction")


def run(spark: SparkSession, config: Config, *, overwrite: bool = False,
        log: Callable[[str], None] = print) -> PredictionSummary:
    """Score and write. `overwrite` (the --overwrite flag) turns predict.mode "create" into "overwrite"."""
    pr = config.predict
    mode = "overwrite" if overwrite and pr.mode == "create" else pr.mode
    started = time.time()
    udf = register(spark, pr.name, pr.model, batch_size=pr.batch_size, resolve=resolver(config.tracking.uri or None))
    table = input_table(spark, config, udf.spec)
    missing = [c for c in pr.partition_by if c not in table.columns]
    if missing:
        raise ConfigError(f"predict.partition_by: {', '.join(map(repr, missing))} not among the input's columns "
                          f"({', '.join(table.columns)})")
    counted: list[Observation] = []  # the counters of this query, as it scores (any session: observed metrics)
    with query_errors():  # a query error, or one in its tasks, as one line
        written = output.selected(with_predictions(table, udf, counted), table.columns, udf.spec, pr.keep,
                                  pr.partition_by)
    scored = output.Tally(written, pr.partition_by)
    out: output.Database | output.CatalogTable | output.Files
    if pr.output_source:
        out = output.Database(spark, pr.output_source, config.sources[pr.output_source])
    elif pr.output_table:
        out = output.CatalogTable(spark, pr.output_table, pr.partition_by)
    else:
        out = output.Files(spark, pr.output, pr.partition_by)
    with query_errors():
        rows_out = out.write(scored, mode)
    summary = PredictionSummary(output=out.target, mode=mode, rows=rows_out, model=udf.export_dir,
                                counts=udf.counts_of(counted[0]), seconds=round(time.time() - started, 1))
    log(f"predicted {rows_out:,} rows into {out.target} ({mode}) in {summary.seconds} s")
    served = {k: v for k, v in summary.counts.items() if k != contract.COUNT_ROWS}
    if served:
        log("  filled nulls / unseen categories: " + ", ".join(f"{k} {v:,}" for k, v in served.items()))
    if isinstance(out, output.Files):
        out.fs.write_text(summary_file(out.target), summary.to_json())
    return summary
