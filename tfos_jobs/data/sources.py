"""Read the configured input tables, with errors that name the source and its location."""
from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

from tfos_jobs.config import SourceConfig
from tfos_jobs.data import adult
from tfos_jobs.errors import InputError

CSV_DEFAULTS = {"header": "true", "inferSchema": "true"}


def read(spark: SparkSession, name: str, src: SourceConfig) -> DataFrame:
    """A lazy DataFrame for one source; a missing path or table is reported before any job runs."""
    try:
        if src.format == "table":
            return spark.table(src.table)
        if src.format == "jdbc":
            return spark.read.format("jdbc").options(**src.options).load()
        paths = [p.strip() for p in src.path.split(",") if p.strip()]
        if src.format == "adult_csv":
            return adult.read(spark, paths)
        options = {**(CSV_DEFAULTS if src.format == "csv" and not src.schema else {}), **src.options}
        reader = spark.read.format(src.format).options(**options)
        if src.schema:
            reader = reader.schema(src.schema)
        return reader.load(paths)
    except AnalysisException as e:
        raise InputError(f"source {name!r} ({src.format} {src.location()}): {_first_line(e)}") from None


def column_types(df: DataFrame) -> dict[str, str]:
    """{column: Spark typeName}, the form FeatureSpec.input_type_errors checks."""
    return {f.name: f.dataType.typeName() for f in df.schema.fields}


def require_columns(name: str, src: SourceConfig, df: DataFrame, wanted: dict[str, tuple[str, ...]]) -> None:
    """Fail naming the source when a column it must provide is missing or of the wrong type."""
    types = column_types(df)
    errs = []
    for col, allowed in wanted.items():
        if col not in types:
            errs.append(f"column {col!r} is missing (columns: {', '.join(types)})")
        elif allowed and types[col] not in allowed:
            errs.append(f"column {col!r} has type {types[col]}, expected one of: {', '.join(allowed)}")
    if errs:
        raise InputError(f"source {name!r} ({src.format} {src.location()}): " + "; ".join(errs))


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0]
