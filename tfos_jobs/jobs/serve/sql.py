"""`tfos sql`: Spark SQL with the prediction UDF registered and the sources as views."""
from __future__ import annotations

import dataclasses
from typing import Callable

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import DataFrame, SparkSession

from tfos_jobs.config import Config
from tfos_jobs.data import sources
from tfos_jobs.data.assemble import assemble
from tfos_jobs.errors import ConfigError, InputError, TfosError
from udfs import register

FEATURES_VIEW = "features"
WINDOWS_VIEW = "windows"


def statements(text: str) -> list[str]:
    """Split a script on semicolons that end a line, the way SQL files are usually written."""
    parts, current = [], []
    for line in text.splitlines():
        if line.strip().startswith("--"):
            continue
        current.append(line)
        if line.rstrip().endswith(";"):
            parts.append("\n".join(current).rstrip().rstrip(";"))
            current = []
    parts.append("\n".join(current))
    return [p.strip() for p in parts if p.strip()]


def open_views(spark: SparkSession, config: Config, spec) -> list[str]:
    """Each configured source as a view under its own name, plus `features`: the main source
    joined with its lookups and activity, as the model saw it in training; or, for a model of
    sensor windows, `windows`."""
    views = []
    for name, src in config.sources.items():
        try:
            sources.read(spark, name, src).createOrReplaceTempView(name)
            views.append(name)
        except InputError:
            continue  # a source that is not there cannot be queried, the rest can
    try:
        if spec.is_sequence:  # one row per window, sensors as arrays, cut as prepare cuts them
            from tfos_jobs.data.sensor_sources import window_table

            window_table(spark, config, spec).createOrReplaceTempView(WINDOWS_VIEW)
            views.append(WINDOWS_VIEW)
        else:
            table, _ = assemble(spark, dataclasses.replace(config, features=spec), for_prediction=True)
            table.createOrReplaceTempView(FEATURES_VIEW)
            views.append(FEATURES_VIEW)
    except InputError:
        pass
    return views


def run(spark: SparkSession, config: Config, script: str, *, model: str | None = None, name: str | None = None,
        output: str | None = None, rows: int = 50, log: Callable[[str], None] = print) -> DataFrame:
    fn = name or config.predict.name
    try:
        udf = register(spark, fn, model or config.predict.model, batch_size=config.predict.batch_size,
                       tracking_uri=config.tracking.uri or None)
    except ConfigError as e:
        if model:  # asked for by --model
            raise
        # Without a trained model the sources can still be queried, as the config's spec joins them.
        udf, why = None, str(e)
    views = open_views(spark, config, udf.spec if udf else config.features)
    if udf:
        log(f"-- {udf.name}({', '.join(udf.spec.model_inputs)}) or {udf.name}(struct(...)); views: {', '.join(views)}")
    else:
        log(f"-- {fn}() is not registered ({why}); views: {', '.join(views)}")
    todo = statements(script)
    if not todo:
        raise TfosError("no SQL statement given")
    result = None
    for text in todo:
        try:
            result = spark.sql(text)
        except (AnalysisException, ParseException) as e:
            raise TfosError(f"SQL error: {str(e).strip().splitlines()[0]}\nin: {text[:300]}") from None
    if output:
        try:
            result.write.parquet(output)
        except AnalysisException as e:
            raise TfosError(f"cannot write {output!r}: {str(e).strip().splitlines()[0]}") from None
        log(f"wrote {spark.read.parquet(output).count():,} rows to {output}")
    else:
        result.show(rows, truncate=False)
    return result
