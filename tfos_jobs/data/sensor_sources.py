"""Reading sensor series from a source of any layout, checked file by file where there are files.

A source is one file, a directory of files (each holding one asset or many; below it may be partition directories such
as `date=2024-01-01/`), a catalog table (Hive, partitioned or not) or a JDBC table: rows are key, time and sensors, and
one table may hold any number of assets.

Files read as one table hide a bad file: Spark takes the schema of one file, and a file without a sensor column reads as
nulls. So every file's columns (with the partition columns of its directories) are checked against the spec first (names
and, for Parquet, types), and an error names the file and the column. Rows of CSV files that do not parse (a sensor
value that is not a number, a time that is not one) keep their text in `_corrupt_record`: prepare sets them aside in
`_rejects/` and counts them, and the steps they leave empty count as missing."""
from __future__ import annotations

import dataclasses
import fnmatch
import os
from dataclasses import dataclass
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import Config, SourceConfig, SplitConfig
from tfos_jobs.data import sources
from tfos_jobs.data.columns import CORRUPT, SOURCE_FILE
from tfos_jobs.storage import Storage
from tfos_jobs.errors import InputError
from tfos_jobs.features.spec import SPARK_TYPES, FeatureSpec

CHECKED_FORMATS = ("parquet", "csv")


def input_types(spec: FeatureSpec) -> dict[str, str]:
    """The Spark types sensor files are read with: key, time, sensors as doubles."""
    key = spec.key
    assert key is not None  # a sequence spec has one (FeatureSpec.errors)
    return {key.name: SPARK_TYPES[key.dtype].upper(), spec.time.name: "TIMESTAMP",
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


def of_source(config: Config, source: str) -> Config:
    """`config` reading its sensor rows from the one source `source` (no union)."""
    return dataclasses.replace(config, prepare=dataclasses.replace(config.prepare, main=source, union=()))


def window_table(spark: SparkSession, config: Config, spec: FeatureSpec, source: str | None = None) -> DataFrame:
    """The usable windows of the prepare sources (or of one `source` of sensor rows), cut as
    prepare cuts them, bounds as timestamps: what the `windows` view and `tfos predict` score.
    Rows that do not parse are left out, as prepare sets them aside."""
    from tfos_jobs.data import windows

    if source is not None:
        config = of_source(config, source)
    rows, _ = read_rows(spark, config, spec)
    good = rows.where(F.col(CORRUPT).isNull())
    return windows.as_timestamps(windows.usable(windows.all_windows(good, spec)))


def split_windows(spark: SparkSession, config: Config, spec: FeatureSpec, split: SplitConfig,
                  eval_below: int | None) -> DataFrame:
    """The usable windows of the prepare sources with the split prepare gave each (`split` and
    `eval_below` as its manifest says), bounds as timestamps; a window that spans a time split's
    instant has the split `split.BOUNDARY`. What `tfos evaluate` takes the train windows from."""
    from tfos_jobs.data import split as split_mod
    from tfos_jobs.data import windows
    from tfos_jobs.data.columns import SPLIT

    rows, _ = read_rows(spark, config, spec)
    assert spec.key is not None  # a sequence spec has one (FeatureSpec.errors)
    cut = windows.all_windows(rows.where(F.col(CORRUPT).isNull()), spec)
    chosen = cut.withColumn(SPLIT, F.coalesce(split_mod.assign(split, spec.key.name, eval_below),
                                              F.lit(split_mod.BOUNDARY)))
    return windows.as_timestamps(windows.usable(chosen))


@dataclass(frozen=True)
class SourceFile:
    """A data file of a source: where it is, the configured path it was found under, its own
    columns (header or footer) and those its partition directories (`date=.../`) give it."""

    path: str
    root: str
    columns: tuple[str, ...]
    partitions: tuple[str, ...] = ()


def _read(spark: SparkSession, name: str, src: SourceConfig, spec: FeatureSpec,
          files: list[SourceFile] | None) -> DataFrame:
    if src.format == "csv" and not src.schema and files:
        df = _read_csv(spark, name, src, spec, files)
    else:
        df = sources.read(spark, name, src)
    df = _typed_partitions(df, spec, files)
    errors = spec.input_type_errors(sources.column_types(df))
    if errors:
        raise InputError(f"source {name!r} ({src.location()}) does not match the feature spec:\n  "
                         + "\n  ".join(m for _, m in errors))
    return df


def _typed_partitions(df: DataFrame, spec: FeatureSpec, files: list[SourceFile] | None) -> DataFrame:
    """Spec columns that come from partition directories (`asset_id=17/`) take the spec's type:
    Spark infers one from the directory names, which may say integer for a string key."""
    types = input_types(spec)
    from_paths = {c for f in files or () for c in f.partitions if c in types}
    return df.withColumns({c: F.col(c).cast(types[c]) for c in sorted(from_paths)}) if from_paths else df


def _read_csv(spark: SparkSession, name: str, src: SourceConfig, spec: FeatureSpec,
              files: list[SourceFile]) -> DataFrame:
    """CSV files read by their header's column names, not by position: one read per distinct header (and configured
    path, the base of its partition directories), the spec's types for its columns, text for any other column."""
    types = input_types(spec)
    groups: dict[tuple[str, tuple[str, ...], tuple[str, ...]], list[str]] = {}
    for f in files:
        groups.setdefault((f.root, f.columns, f.partitions), []).append(f.path)
    parts = []
    for (root, header, partitions), paths in groups.items():
        ddl = ", ".join(f"`{c}` {types.get(c, 'STRING')}" for c in header)
        options = {**src.options, "basePath": root} if partitions else src.options
        part = dataclasses.replace(src, format="csv", path=",".join(paths), table=None, schema=ddl, options=options)
        parts.append(sources.read(spark, name, part).select(*spec.stored_columns, SOURCE_FILE, CORRUPT))
    table = parts[0]
    for other in parts[1:]:
        table = table.unionByName(other)
    return table


def check_files(spark: SparkSession, name: str, src: SourceConfig, spec: FeatureSpec) -> list[SourceFile] | None:
    """Check every file of a Parquet or CSV source against the spec (None for sources without
    files: tables, JDBC); an error names the source, the file and the column."""
    if src.format not in CHECKED_FORMATS:
        return None
    fs = Storage.as_spark_sees(spark)
    pattern = src.options.get("pathGlobFilter", "*")
    sep = src.options.get("sep", src.options.get("delimiter", ","))
    out = []
    for given in (p.strip() for p in (src.path or "").split(",") if p.strip()):
        root = fs.qualify(given)
        for path in fs.data_files(root):
            if not fnmatch.fnmatch(path.rsplit("/", 1)[-1], pattern):
                continue
            partitions = partition_columns(root, path)
            if src.format == "parquet":
                own = _parquet_columns(spark, name, path)
                # a partition column's type is Spark's guess from directory names: cast in _read
                errors = [(c, m) for c, m in spec.input_type_errors({**own, **dict.fromkeys(partitions, "any")})
                          if c not in partitions]
            else:
                own = dict.fromkeys(_csv_header(fs, path, sep), "any")  # only the names are read
                errors = [(c, m) for c, m in spec.input_type_errors(dict.fromkeys([*own, *partitions], "any"))
                          if "is missing" in m]
            if errors:
                raise InputError(f"source {name!r}: file {path}: " + "; ".join(m for _, m in errors))
            out.append(SourceFile(path, root, tuple(own), partitions))
    if not out:
        raise InputError(f"source {name!r} ({src.format} {src.location()}): no files"
                         + (f" matching pathGlobFilter {pattern!r}" if pattern != "*" else ""))
    return sorted(out, key=lambda f: f.path)


def partition_columns(root: str, path: str) -> tuple[str, ...]:
    """The `name=value` directories between a source's path and one of its files, outermost first."""
    relative = path[len(root.rstrip("/")) + 1:] if path.startswith(root.rstrip("/") + "/") else ""
    return tuple(part.split("=", 1)[0] for part in relative.split("/")[:-1] if "=" in part)


def _parquet_columns(spark: SparkSession, name: str, path: str) -> dict[str, str]:
    """{column: Spark typeName} from the file's footer: with pyarrow for local files, else Spark."""
    local = path.removeprefix("file:") if path.startswith(("file:", "/")) else None
    if local is not None and os.path.exists(local):
        import pyarrow.parquet as pq

        # INT96 (Spark's own default for timestamps) is read as nanoseconds unless told otherwise;
        # Spark reads it, so only a true nanosecond column is refused
        schema = pq.ParquetFile(local, coerce_int96_timestamp_unit="us").schema_arrow
        for field in schema:
            if _is_nanos(field.type):
                raise InputError(f"source {name!r}: file {path}: column {field.name!r} holds nanosecond timestamps, "
                                 f"which Spark cannot read; {sources.NANOS_HINT}")
        return {f.name: _spark_type_name(f.type) for f in schema}
    try:
        return {f.name: f.dataType.typeName() for f in spark.read.parquet(path).schema.fields}
    except AnalysisException as e:
        raise InputError(f"source {name!r}: file {path}: {sources.explain(e)}") from None


def _is_nanos(arrow_type: Any) -> bool:
    import pyarrow as pa

    return pa.types.is_timestamp(arrow_type) and arrow_type.unit == "ns"


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


def _csv_header(fs: Storage, path: str, sep: str) -> list[str]:
    first = fs.read_first_line(path)
    return [c.strip().strip('"') for c in first.split(sep)]
