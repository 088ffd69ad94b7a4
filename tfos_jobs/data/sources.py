"""Read the configured input tables, with errors that name the source and its location."""
from __future__ import annotations

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

from tfos_jobs.config import SourceConfig
from tfos_jobs.data import adult
from tfos_jobs.data.columns import CORRUPT, SOURCE_FILE
from tfos_jobs.errors import InputError

TEXT_FORMATS = ("csv", "json")


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
        defaults = {"header": "true", **({} if src.schema else {"inferSchema": "true"})} if src.format == "csv" else {}
        options = {**defaults, **src.options}
        reader = spark.read.format(src.format).options(**options)
        if src.format in TEXT_FORMATS:
            return _read_text_format(reader, paths, src.schema)
        if src.schema:
            reader = reader.schema(src.schema)
        return reader.load(paths)
    except AnalysisException as e:
        raise InputError(f"source {name!r} ({src.format} {src.location()}): {_first_line(e)}") from None


def _read_text_format(reader, paths: list[str], schema: str | None) -> DataFrame:
    """CSV and JSON: a row that does not parse (bad field count, a number that is not one,
    broken JSON) keeps its raw text in `_corrupt_record`, with its file in `_source_file`,
    instead of turning silently into nulls. Without a schema, the inferred one is used."""
    base = StructType.fromDDL(schema) if schema else reader.load(paths).schema
    fields = [f for f in base.fields if f.name != CORRUPT]
    full = StructType(fields + [StructField(CORRUPT, StringType())])
    df = reader.schema(full).option("mode", "PERMISSIVE").option("columnNameOfCorruptRecord", CORRUPT).load(paths)
    return df.withColumn(SOURCE_FILE, F.input_file_name())


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
