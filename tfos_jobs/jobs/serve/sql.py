"""`tfos sql`: Spark SQL with the prediction UDF registered and the sources as views."""
from __future__ import annotations

import dataclasses
from typing import Callable

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from tfos_jobs.config import Config
from tfos_jobs.data import sources
from tfos_jobs.data.assemble import assemble
from tfos_jobs.errors import ConfigError, InputError, TfosError
from tfos_jobs.serving.error_lines import error_line, query_errors
from tfos_jobs.session_builder import settle_console
from tfos_jobs.tracking.registry import resolver
from udfs import register
from udfs.jvm_engine import SCORES_IN

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
    """Each configured source as a view under its own name, plus `features`: the main source joined with its lookups and
    aggregates, as the model saw it in training; or, for a model of sensor windows, `windows`."""
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
    """`tfos sql`: the script's statements run (`query`), the last one's result printed or written."""
    result = query(spark, config, script, model=model, name=name, log=log)
    show(spark, result, output=output, rows=rows, log=log)
    return result


def query(spark: SparkSession, config: Config, script: str, *, model: str | None = None, name: str | None = None,
          log: Callable[[str], None] = print) -> DataFrame:
    """The prediction function registered (`name`, default `predict.name`, on `model`, default
    `predict.model`) and the config's sources as views, then every statement of `script` run;
    the last one's result, not yet computed. Without a model the views can still be queried."""
    fn = name or config.predict.name
    try:
        udf = register(spark, fn, model or config.predict.model, batch_size=config.predict.batch_size, engine=config.predict.engine,
                       setting="predict.model", resolve=resolver(config.tracking.uri or None))
    except ConfigError as e:
        if model:  # asked for by --model
            raise
        # Without a trained model the sources can still be queried, as the config's spec joins them.
        udf, why = None, str(e)
    views = open_views(spark, config, udf.spec if udf else config.features)
    if udf:
        log(f"-- {udf.name}({', '.join(udf.spec.model_inputs)}) or {udf.name}(struct(...)), "
            f"{SCORES_IN[udf.engine]}; views: {', '.join(views)}")
    else:
        log(f"-- {fn}() is not registered ({why}); views: {', '.join(views)}")
    todo = statements(script)
    if not todo:
        raise TfosError("no SQL statement given")
    result = None
    for n, text in enumerate(todo, 1):
        with query_errors(f"statement {n} of {len(todo)}: " if len(todo) > 1 else ""):
            result = spark.sql(text)
    assert result is not None  # there was a statement
    return result


def show(spark: SparkSession, result: DataFrame, *, output: str | None = None, rows: int = 50,
         log: Callable[[str], None] = print) -> None:
    """A query's result printed (its first `rows`), or written as Parquet to `output`."""
    with query_errors():
        if output:
            try:
                result.write.parquet(output)
            except AnalysisException as e:  # the output is there already, or cannot be written
                raise TfosError(f"cannot write {output!r}: {error_line(e)}") from None
        else:
            # runs the query; a classic DataFrame's method, not in pyspark's DataFrame type (a column to mypy)
            table = result._show_string(rows, truncate=False)  # type: ignore[operator]
            settle_console(spark)  # a stage bar drawn late would overwrite the table's first line
            print(table)
    if output:
        log(f"wrote {spark.read.parquet(output).count():,} rows to {output}")
