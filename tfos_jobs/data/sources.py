"""Read the configured input tables, with errors that name the source and its location."""
from __future__ import annotations

from typing import Any, cast

from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException, ParseException
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StringType, StructField, StructType, UserDefinedType

from tfos_jobs.config import SourceConfig
from tfos_jobs.data import adult, jdbc
from tfos_jobs.data.columns import CORRUPT, SOURCE_FILE
from tfos_jobs.errors import ConfigError, InputError

TEXT_FORMATS = ("csv", "json")
# Spark reads Parquet timestamps in micro- or milliseconds; pandas and pyarrow write nanoseconds.
NANOS_HINT = ("write it with microsecond timestamps: pandas df.to_parquet(path, coerce_timestamps=\"us\", "
              "allow_truncated_timestamps=True), pyarrow pq.write_table(table, path, coerce_timestamps=\"us\") "
              "(files Spark and Hive write need nothing: Spark reads their timestamps)")


def read(spark: SparkSession, name: str, src: SourceConfig) -> DataFrame:
    """A lazy DataFrame for one source, its `filter` applied; a missing path or table, an
    unreachable database or refused credentials are reported before any job runs."""
    df = _jdbc(spark, name, src) if src.format == "jdbc" else _read(spark, name, src)
    if not src.filter:
        return df
    try:
        return df.where(src.filter)
    except (AnalysisException, ParseException) as e:
        raise ConfigError(f"sources.{name}.filter: {src.filter!r}: {_first_line(e)}") from None


def _read(spark: SparkSession, name: str, src: SourceConfig) -> DataFrame:
    try:
        if src.format == "table":
            return _table(spark, name, src)
        assert src.path is not None  # file formats need one (SourceConfig.errors)
        paths = [p.strip() for p in src.path.split(",") if p.strip()]
        if src.format == "adult_csv":
            return adult.read(spark, paths)
        defaults = {"header": "true", **({} if src.schema else {"inferSchema": "true"})} if src.format == "csv" else {}
        reader = spark.read.format(src.format).options(**{**defaults, **src.options})
        if src.format in TEXT_FORMATS:
            return _read_text_format(reader, paths, src.schema)
        if src.schema:
            reader = reader.schema(src.schema)
        return reader.load(paths)
    except AnalysisException as e:
        raise InputError(f"source {name!r} ({src.format} {src.location()}): {explain(e)}") from None


def _table(spark: SparkSession, name: str, src: SourceConfig) -> DataFrame:
    assert src.table is not None  # format = "table" needs one (SourceConfig.errors)
    try:
        return spark.table(src.table)
    except AnalysisException as e:
        hint = "" if spark.conf.get("spark.sql.catalogImplementation") == "hive" else \
            " (this session has no Hive metastore: set spark.hive = true to read its tables)"
        raise InputError(f"source {name!r} (table {src.table}): {_first_line(e)}{hint}") from None


def _jdbc(spark: SparkSession, name: str, src: SourceConfig) -> DataFrame:
    """The driver resolves the schema here (one query); executors read the rows later."""
    jdbc.check_reachable(name, src)
    opts = jdbc.options(name, src)
    secret = opts.get("password")
    try:
        return spark.read.format("jdbc").options(**opts).load()
    except (Py4JJavaError, CapturedException) as e:  # the JDBC driver's SQLException, through Py4J
        raise InputError(jdbc.redact(f"source {name!r} (jdbc {src.location()}): {jdbc.driver_error(e)}", secret)) from None


def _read_text_format(reader, paths: list[str], schema: str | None) -> DataFrame:
    """CSV and JSON: a row that does not parse (bad field count, a number that is not one,
    broken JSON) keeps its raw text in `_corrupt_record`, with its file in `_source_file`,
    instead of turning silently into nulls. Without a schema, the inferred one is used."""
    # fromDDL is typed on DataType; a DDL of columns gives a StructType
    base = cast(StructType, StructType.fromDDL(schema)) if schema else reader.load(paths).schema
    fields = [f for f in base.fields if f.name != CORRUPT]
    full = StructType(fields + [StructField(CORRUPT, StringType())])
    df = reader.schema(full).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT).load(paths)
    return df.withColumn(SOURCE_FILE, F.input_file_name())


def column_types(df: DataFrame) -> dict[str, str]:
    """{column: Spark typeName, an array's as array<element>}, the form FeatureSpec.input_type_errors checks (and the
    jar's `PredictionFunction.label`)."""
    return {f.name: _label(f.dataType) for f in df.schema.fields}


def _label(t: Any) -> str:
    if isinstance(t, ArrayType):
        return f"array<{_label(t.elementType)}>"
    return t.simpleString() if isinstance(t, UserDefinedType) else t.typeName()  # Spark ML's Vector: "vector"


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


def explain(e: Exception) -> str:
    """Spark's message for a source that cannot be read, with the remedy where one is known."""
    first = _first_line(e)
    return f"{first}; {NANOS_HINT}" if "TIMESTAMP(NANOS" in first else first


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0]
