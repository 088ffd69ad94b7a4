"""Where `tfos predict` writes: Parquet files, a catalog (Hive) table or a database table.

Every target supports the same modes (predict.mode). The rows going in are counted by the
write's own job (a `Tally`, so the input is computed once; a database write, which runs a plan
of its own, counts them first); afterwards the target is checked to hold what this run wrote,
counted where it landed:
  create                fail if the target exists
  overwrite             replace the target
  overwrite_partitions  replace only the partitions this run writes (files, catalog tables)
  append                add the rows; the target's count grows by exactly the rows scored
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from tfos_jobs.config import SourceConfig
from tfos_jobs.data import columns, jdbc, sources
from tfos_jobs.features.spec import WINDOW_END, WINDOW_START, FeatureSpec
from tfos_jobs.storage import Storage, left_staging, restore_aside, staging_beside, swap_into
from tfos_jobs.errors import ConfigError, OutputExistsError, TfosError

WRITE_ERRORS = (AnalysisException, CapturedException, Py4JJavaError)


def selected(scored: DataFrame, input_columns: list[str], spec: FeatureSpec, keep: tuple[str, ...],
             partition_by: tuple[str, ...]) -> DataFrame:
    """What predictions hold: the key (and a window's bounds), the input columns asked for
    (predict.keep, predict.partition_by), then the prediction columns; no other input column
    and none of the package's own (columns.INTERNAL)."""
    missing = [c for c in keep if c not in input_columns]
    if missing:
        raise ConfigError(f"predict.keep: {', '.join(map(repr, missing))} not among the input's columns "
                          f"({', '.join(c for c in input_columns if c not in columns.INTERNAL)})")
    keys = [spec.key.name] if spec.key else []
    if spec.is_sequence:
        keys += [WINDOW_START, WINDOW_END]
    predictions = [c for c in scored.columns if c not in input_columns and c not in columns.INTERNAL]
    wanted = [c for c in (*keys, *keep, *partition_by) if c in input_columns and c not in columns.INTERNAL]
    return scored.select(*dict.fromkeys([*wanted, *predictions]))


class Tally:
    """A DataFrame to write, observed while it is written: its rows and the partition values
    it holds, counted in the write's own tasks (each task once, as for any action)."""

    def __init__(self, df: DataFrame, partition_by: tuple[str, ...] = ()):
        self._seen = Observation()
        metrics = [F.count(F.lit(1)).alias("rows")]
        if partition_by:
            metrics.append(F.collect_set(F.struct(*partition_by)).alias("partitions"))
        self.partition_by = partition_by
        self.source = df
        self.df = df.observe(self._seen, *metrics)
        self._counted: int | None = None

    @property
    def rows(self) -> int:
        """Rows written; read it only after the write succeeded (it waits for the write)."""
        return self._counted if self._counted is not None else int(self._seen.get["rows"])

    def count_first(self) -> DataFrame:
        """For writers that run their own plan, outside the observed one (JDBC: Spark's observation then reports 0
        rows): count the input in a job of its own, and return the DataFrame to write."""
        self._counted = self.source.count()
        return self.source

    def partitions(self, spark: SparkSession) -> DataFrame:
        """The partition values written, as a DataFrame of the partition columns."""
        return spark.createDataFrame(self._seen.get["partitions"], self.df.select(*self.partition_by).schema)


class Files:
    """Parquet files under a directory. "create" and "overwrite" are whole or absent: the files
    are written and counted beside the target, then moved into place (`storage.swap_into`), so
    a run killed mid-write leaves no partial output and the same command can simply be run
    again. "append" and "overwrite_partitions" write into the target, as Spark commits them."""

    def __init__(self, spark: SparkSession, path: str, partition_by: tuple[str, ...]):
        self.spark, self.partition_by = spark, partition_by
        self.fs = Storage.as_spark_sees(spark)
        self.target = self.fs.qualify(path)

    def _count(self, path: str, written: DataFrame | None = None) -> int:
        if not self.fs.exists(path):
            return 0
        return _in_partitions(self.spark.read.parquet(path), written, self.partition_by).count()

    def write(self, out: Tally, mode: str) -> int:
        restore_aside(self.fs, self.target)  # what a run killed between its renames moved aside
        for left in left_staging(self.fs, self.target):  # what a killed run wrote and never published
            self.fs.delete(left)
        if self.fs.exists(self.target) and mode == "create":
            raise OutputExistsError(f"output directory {self.target!r} exists; pass --overwrite to replace it "
                                    "or set predict.mode (overwrite, overwrite_partitions, append)")
        writer = out.df.write.partitionBy(*self.partition_by) if self.partition_by else out.df.write
        if mode in ("create", "overwrite"):
            staging = staging_beside(self.target)
            try:
                writer.mode("error").parquet(staging)
                rows = _checked(self.target, self._count(staging), out.rows)
            except BaseException:
                self.fs.delete(staging)
                raise
            swap_into(self.fs, staging, self.target)
            return rows
        before = self._count(self.target) if mode == "append" else 0
        with _partition_overwrite(self.spark, mode):
            writer.mode("append" if mode == "append" else "overwrite").parquet(self.target)
        written = out.partitions(self.spark) if mode == "overwrite_partitions" else None
        return _checked(self.target, self._count(self.target, written) - before, out.rows)


class CatalogTable:
    def __init__(self, spark: SparkSession, name: str, partition_by: tuple[str, ...]):
        self.spark, self.target, self.partition_by = spark, name, partition_by

    def write(self, out: Tally, mode: str) -> int:
        df = out.df
        exists = self.spark.catalog.tableExists(self.target)
        if exists and mode == "create":
            raise OutputExistsError(f"table {self.target!r} exists; pass --overwrite to replace it "
                                    "or set predict.mode (overwrite, overwrite_partitions, append)")
        before = self.spark.table(self.target).count() if exists and mode == "append" else 0
        try:
            if exists and mode in ("append", "overwrite_partitions"):
                self._check_layout(df)
                table_columns = self.spark.table(self.target).columns  # insertInto matches by position
                with _partition_overwrite(self.spark, mode):
                    df.select(*table_columns).write.insertInto(self.target, overwrite=mode != "append")
            else:
                writer = df.write.partitionBy(*self.partition_by) if self.partition_by else df.write
                writer.mode("overwrite" if exists else "error").saveAsTable(self.target)
        except WRITE_ERRORS as e:
            raise TfosError(f"cannot write table {self.target!r}: {jdbc.driver_error(e)}") from None
        written = out.partitions(self.spark) if mode == "overwrite_partitions" else None
        rows = _in_partitions(self.spark.table(self.target), written, self.partition_by).count()
        return _checked(self.target, rows - before, out.rows)

    def _check_layout(self, df: DataFrame) -> None:
        """Appending by position into a table of other columns would mix them up: refuse it."""
        table = self.spark.table(self.target)
        ours, theirs = sorted(df.columns), sorted(table.columns)
        if ours != theirs:
            raise TfosError(f"table {self.target!r} has columns {', '.join(theirs)}; this run writes "
                            f"{', '.join(ours)}: write a new table or pass --overwrite")
        parts = [c.name for c in self.spark.catalog.listColumns(self.target) if c.isPartition]
        if parts != list(self.partition_by):
            raise TfosError(f"table {self.target!r} is partitioned by ({', '.join(parts)}); predict.partition_by "
                            f"is ({', '.join(self.partition_by)})")


class Database:
    def __init__(self, spark: SparkSession, name: str, src: SourceConfig):
        self.spark, self.name, self.src = spark, name, src
        self.target = src.location()

    def write(self, out: Tally, mode: str) -> int:
        jdbc.check_reachable(self.name, self.src)
        opts = jdbc.options(self.name, self.src)
        before = self._count() if mode == "append" else 0
        df = out.count_first()
        spark_mode = {"create": "error", "overwrite": "overwrite", "append": "append"}[mode]
        try:
            # truncate: an overwrite keeps the table's definition, grants and indexes
            df.write.format("jdbc").options(**opts).option("truncate", "true").mode(spark_mode).save()
        except WRITE_ERRORS as e:
            message = jdbc.driver_error(e)
            if mode == "create" and "already exists" in message:
                raise OutputExistsError(f"table {self.target}: already exists; pass --overwrite to replace it "
                                        "or set predict.mode = \"append\"") from None
            raise TfosError(jdbc.redact(f"cannot write predictions to {self.target}: {message}",
                                        opts.get("password"))) from None
        return _checked(self.target, self._count() - before, out.rows)

    def _count(self) -> int:
        try:
            return sources.read(self.spark, self.name, self.src).count()
        except TfosError:
            return 0  # the table does not exist yet


def _in_partitions(table: DataFrame, written: DataFrame | None, partition_by: tuple[str, ...]) -> DataFrame:
    if written is None or not partition_by:
        return table
    return table.join(F.broadcast(written), list(partition_by), "left_semi")


@contextmanager
def _partition_overwrite(spark: SparkSession, mode: str) -> Iterator[None]:
    """Dynamic partition overwrite for this write only: partitions the run does not write stay."""
    key = "spark.sql.sources.partitionOverwriteMode"
    previous = spark.conf.get(key)
    if previous is None:  # get without a default returns the built-in one, or raises
        raise TfosError(f"{key}: no value to restore after the write")
    spark.conf.set(key, "dynamic" if mode == "overwrite_partitions" else "static")
    try:
        yield
    finally:
        spark.conf.set(key, previous)


def _checked(target: str, rows: int, rows_in: int) -> int:
    if rows != rows_in:
        raise TfosError(f"{target}: wrote {rows} rows for {rows_in} input rows")
    return rows
