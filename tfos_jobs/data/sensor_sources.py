"""Reading sensor series: one file (or more) per asset, Parquet or CSV, checked file by file.

A directory of per-asset files read as one table hides a bad file: Spark takes the schema of
one file, and a file without a sensor column reads as nulls. So every file's columns are
checked against the spec first (names and, for Parquet, types), and an error names the file
and the column. Rows of CSV files that do not parse (a sensor value that is not a number, a
time that is not one) keep their text in `_corrupt_record`: prepare sets them aside in
`_rejects/` and counts them, and the steps they leave empty count as missing.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config, SourceConfig
from tfos_jobs.data import sources
from tfos_jobs.data.columns import CORRUPT, SOURCE_FILE
from tfos_jobs.storage import HadoopFS
from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import SPARK_TYPES, FeatureSpec

CHECKED_FORMATS = ("parquet", "csv")


def input_types(spec: FeatureSpec) -> dict[str, str]:
    """The Spark types sensor files are read with: key, time, sensors as doubles."""
    return {spec.key.name: SPARK_TYPES[spec.key.dtype].upper(), spec.time.name: "TIMESTAMP",
            **{f.name: "DOUBLE" for f in spec.sequences}}


def read_rows(spark: SparkSession, config: Config, spec: FeatureSpec) -> tuple[DataFrame, dict[str, Any]]:
    """The rows of the main source and of `prepare.union`, as key, time, sensors, `_source_file`
    and `_corrupt_record` (null for rows that parsed); and per source its location and files."""
    prep = config.prepare
    tables, info = [], {}
    for name in (prep.main, *prep.union):
        src = config.sources[name]
        files = check_files(spark, name, src, spec)
        df = _read(spark, name, src, spec, files)
        if SOURCE_FILE not in df.columns:
            df = df.withColumn(SOURCE_FILE, F.input_file_name())
        if CORRUPT not in df.columns:
            df = df.withColumn(CORRUPT, F.lit(None).cast("string"))
        # Parquet times without a zone read as timestamp_ntz, CSV times as timestamps: one type,
        # in the session's time zone (set spark.sql.session.timeZone = UTC for zone-less data).
        picked = [F.col(c).cast("timestamp").alias(c) if c == spec.time.name else F.col(c) for c in spec.stored_columns]
        tables.append(df.select(*picked, SOURCE_FILE, CORRUPT))
        info[name] = {"location": src.location(), "files": len(files) if files is not None else None}
    table = tables[0]
    for other in tables[1:]:
        table = table.unionByName(other)
    return table, info


def window_table(spark: SparkSession, config: Config, spec: FeatureSpec, source: str | None = None) -> DataFrame:
    """The usable windows of the prepare sources (or of one `source` of sensor rows), cut as
    prepare cuts them, bounds as timestamps: what the `windows` view and `tfos predict` score.
    Rows that do not parse are left out, as prepare sets them aside."""
    from tfos_jobs.data import windows

    if source is not None:
        config = dataclasses.replace(config, prepare=dataclasses.replace(config.prepare, main=source, union=()))
    rows, _ = read_rows(spark, config, spec)
    good = rows.where(F.col(CORRUPT).isNull())
    return windows.as_timestamps(windows.usable(windows.all_windows(good, spec)))


def _read(spark: SparkSession, name: str, src: SourceConfig, spec: FeatureSpec,
          files: dict[str, list[str]] | None) -> DataFrame:
    if src.format == "csv" and not src.schema and files:
        return _read_csv(spark, name, src, spec, files)
    df = sources.read(spark, name, src)
    errors = spec.input_type_errors(sources.column_types(df))
    if errors:
        raise InputError(f"source {name!r} ({src.location()}) does not match the feature spec:\n  "
                         + "\n  ".join(m for _, m in errors))
    return df


def _read_csv(spark: SparkSession, name: str, src: SourceConfig, spec: FeatureSpec,
              files: dict[str, list[str]]) -> DataFrame:
    """CSV files read by their header's column names, not by position: one read per distinct
    header, the spec's types for its columns, text for any other column."""
    types = input_types(spec)
    by_header: dict[tuple[str, ...], list[str]] = {}
    for path, header in files.items():
        by_header.setdefault(tuple(header), []).append(path)
    parts = []
    for header, paths in by_header.items():
        ddl = ", ".join(f"`{c}` {types.get(c, 'STRING')}" for c in header)
        part = dataclasses.replace(src, format="csv", path=",".join(paths), table=None, schema=ddl)
        parts.append(sources.read(spark, name, part).select(*spec.stored_columns, SOURCE_FILE, CORRUPT))
    table = parts[0]
    for other in parts[1:]:
        table = table.unionByName(other)
    return table


def check_files(spark: SparkSession, name: str, src: SourceConfig, spec: FeatureSpec) -> dict[str, list[str]] | None:
    """Check every file of a Parquet or CSV source; returns {file: its columns} (None for other formats)."""
    if src.format not in CHECKED_FORMATS:
        return None
    files = list_files(spark, src)
    if not files:
        raise InputError(f"source {name!r} ({src.format} {src.location()}): no files")
    out = {}
    for path in files:
        if src.format == "parquet":
            columns = _parquet_columns(spark, path)
            errors = spec.input_type_errors(columns)
        else:
            columns = dict.fromkeys(_csv_header(spark, path, src.options.get("sep", src.options.get("delimiter", ","))))
            errors = [(c, m) for c, m in spec.input_type_errors({c: "any" for c in columns}) if "is missing" in m]
        if errors:
            raise InputError(f"source {name!r}: file {path}: " + "; ".join(m for _, m in errors))
        out[path] = list(columns)
    return out


def list_files(spark: SparkSession, src: SourceConfig) -> list[str]:
    """The data files of a source's paths: files as given, directories' files matching the
    `pathGlobFilter` option (hidden and marker files excluded)."""
    pattern = src.options.get("pathGlobFilter", "*")
    out = []
    for path in (p.strip() for p in (src.path or "").split(",") if p.strip()):
        fs = HadoopFS(spark)
        qualified = fs.qualify(path)
        listed = fs.list_files(qualified)
        if listed:
            out += [f"{qualified.rstrip('/')}/{n}" for n, _ in listed if fnmatch.fnmatch(n, pattern)]
        elif fs.exists(qualified):
            out.append(qualified)
    return sorted(out)


def _parquet_columns(spark: SparkSession, path: str) -> dict[str, str]:
    """{column: Spark typeName} from the file's footer: with pyarrow for local files, else Spark."""
    local = path.removeprefix("file:") if path.startswith(("file:", "/")) else None
    if local is not None and os.path.exists(local):
        import pyarrow.parquet as pq

        return {f.name: _spark_type_name(f.type) for f in pq.read_schema(local)}
    return {f.name: f.dataType.typeName() for f in spark.read.parquet(path).schema.fields}


def _spark_type_name(arrow_type: Any) -> str:
    import pyarrow as pa

    t = pa.types
    if t.is_timestamp(arrow_type):
        return "timestamp"
    if t.is_floating(arrow_type):
        return "double" if arrow_type.bit_width == 64 else "float"
    if t.is_integer(arrow_type):
        return {8: "byte", 16: "short", 32: "integer", 64: "long"}[arrow_type.bit_width]
    if t.is_decimal(arrow_type):
        return "decimal"
    if t.is_string(arrow_type) or t.is_large_string(arrow_type):
        return "string"
    if t.is_date(arrow_type):
        return "date"
    if t.is_boolean(arrow_type):
        return "boolean"
    return str(arrow_type)


def _csv_header(spark: SparkSession, path: str, sep: str) -> list[str]:
    fs = HadoopFS(spark)
    first = fs.read_first_line(path)
    return [c.strip().strip('"') for c in first.split(sep)]
